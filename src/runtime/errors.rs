//! How the controllers read the API server's errors: a conflict is a race to retry from
//! fresh caches at once; an error that may pass (no answer, a 5xx, a 429) is worth asking
//! again; anything else is a refusal to back off from and report. A 429, 503 or 504 seldom
//! gets here: the client (kube's default retry layer) asks again itself first, up to 15
//! times.

/// The API server's message for a JSON Patch it could not apply to the stored object.
const PATCH_NOT_APPLICABLE: &str = "the server rejected our request due to an error in our request";

/// Whether an API error means "the object moved under us": a 409 (a stale
/// `resourceVersion`, a delete's UID or `resourceVersion` precondition), or a JSON Patch
/// whose `test` no longer holds. Never a guess from words in the message: a validation or
/// admission refusal quotes object names and values (`latest`, `e2e-test`), and taking it
/// for a race would retry it at once, for good, instead of backing off and reporting it.
pub fn is_conflict(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => {
            s.code == 409
                || (s.code == 422
                    // How the API server reports a JSON Patch that does not apply; the
                    // cause is only in the details, which the client does not keep.
                    && (s.message == PATCH_NOT_APPLICABLE
                        || (s.message.starts_with("testing value ")
                            && s.message.ends_with("test failed"))))
        }
        _ => false,
    }
}

/// Whether an error may pass if asked again: no answer, a 5xx, or a 429 (throttled); not
/// a refusal (another 4xx), nor an answer that does not decode (it would again).
pub fn may_pass(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code >= 500 || s.code == 429,
        kube::Error::SerdeError(_) => false,
        _ => true,
    }
}

/// An error in one line for logs, conditions and Events: the API server's own message and
/// reason, never a response body.
pub fn brief(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.reason.is_empty() => s.message.clone(),
        kube::Error::Api(s) => format!("{} ({})", s.message, s.reason),
        // serde's message names the line, column and expectation; the body is not in it.
        kube::Error::SerdeError(e) => format!("cannot decode the response: {e}"),
        other => other.to_string(),
    }
}

/// A watch error in one line, like [`brief`].
pub fn brief_watch(e: &kube::runtime::watcher::Error) -> String {
    use kube::runtime::watcher::Error;
    match e {
        Error::InitialListFailed(e) => format!("listing: {}", brief(e)),
        Error::WatchStartFailed(e) => format!("starting the watch: {}", brief(e)),
        Error::WatchFailed(e) => format!("watching: {}", brief(e)),
        Error::WatchError(s) => format!("watching: {} ({})", s.message, s.reason),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(Box::new(
            Status::failure(message, "Invalid").with_code(code),
        ))
    }

    #[test]
    fn conflicts_are_races_and_refusals_are_not() {
        assert!(is_conflict(&api(409, "the object has been modified")));
        assert!(is_conflict(&api(422, PATCH_NOT_APPLICABLE)));
        assert!(is_conflict(&api(
            422,
            "testing value /metadata/resourceVersion failed: test failed"
        )));
        assert!(!is_conflict(&api(
            422,
            "Pod \"x\" is invalid: spec.containers[0].name: Invalid value: \"-5m\""
        )));
        assert!(!is_conflict(&api(403, "exceeded quota")));
        // Refusals that quote names or values with the words in them.
        assert!(!is_conflict(&api(
            422,
            "Deployment.apps \"e2e-test\" is invalid: spec.replicas: Invalid value: -1"
        )));
        assert!(!is_conflict(&api(
            422,
            "horizontalpodautoscalers \"web\" is forbidden: ValidatingAdmissionPolicy 'no-latest' denied request: image tag latest; precondition of the platform team"
        )));
    }

    #[test]
    fn a_brief_error_is_the_api_servers_message() {
        assert_eq!(brief(&api(422, "bad")), "bad (Invalid)");
    }

    #[test]
    fn only_errors_that_are_no_answer_or_a_5xx_or_429_may_pass() {
        let api = |code: u16| api(code, "x");
        assert!(may_pass(&api(503)), "the API server starting");
        assert!(may_pass(&api(500)));
        assert!(!may_pass(&api(403)), "a refusal stays one");
        assert!(!may_pass(&api(401)));
        assert!(
            may_pass(&api(429)),
            "throttled while the API server restarts"
        );
        let undecodable = serde_json::from_str::<u8>("x").unwrap_err();
        assert!(!may_pass(&kube::Error::SerdeError(undecodable)));
        assert!(
            may_pass(&kube::Error::LinesCodecMaxLineLengthExceeded),
            "not an answer"
        );
    }
}
