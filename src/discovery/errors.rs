//! How discovery reads the API server's refusals of its writes.

/// The API server refused a create because the namespace is being deleted: the namespace
/// store lags the deletion, and the namespace's objects go with it. That stops nothing
/// else.
pub fn namespace_being_deleted(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(e) if e.code == 403 && e.message.contains("being terminated"))
}

/// A write to an object that is gone (404) needs nothing more: it was deleted meanwhile,
/// pruned, or taken with its owner.
pub fn gone_is_done<T>(result: Result<T, kube::Error>) -> Result<(), kube::Error> {
    match result {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(Box::new(Status::failure(message, "").with_code(code)))
    }

    #[test]
    fn a_terminating_namespace_and_a_gone_object_are_told_apart_from_failures() {
        assert!(namespace_being_deleted(&api(
            403,
            "unable to create new content in namespace shop because it is being terminated"
        )));
        assert!(!namespace_being_deleted(&api(403, "forbidden")));
        assert!(gone_is_done(Err::<(), _>(api(404, "not found"))).is_ok());
        assert!(gone_is_done(Ok(())).is_ok());
        assert!(gone_is_done(Err::<(), _>(api(409, "conflict"))).is_err());
    }
}
