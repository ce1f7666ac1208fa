use super::*;
use crate::api::discovery::NamespaceInventorySpec;

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}

#[test]
fn a_deleted_namespace_is_forgotten_by_what_wrote_it() {
    let written = WrittenDigests::default();
    let status = NamespaceInventoryStatus::default();
    written.written(("shop".to_string(), 0), &status);
    written.written(("other".to_string(), 0), &status);
    written.forget_namespace("shop");
    assert!(!written.unchanged(&("shop".to_string(), 0), &status));
    assert!(written.unchanged(&("other".to_string(), 0), &status));
}

fn stored(part: NamespaceInventoryStatus, i: i32, n: i32) -> Arc<NamespaceInventory> {
    let mut inv = NamespaceInventory::new(
        &inventory::part_name(i as usize),
        NamespaceInventorySpec { part: i, parts: n },
    );
    inv.metadata.namespace = Some("shop".into());
    inv.status = Some(part);
    Arc::new(inv)
}

#[test]
fn only_what_changed_is_written() {
    let now = ts("2026-03-01T04:00:00Z");
    let status = NamespaceInventoryStatus {
        images: vec!["web:2".into()],
        ..Default::default()
    };
    let written = WrittenDigests::default();
    let first = plan_parts("shop", vec![status.clone()], |_| None, &written, now);
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].name, "inventory");
    assert!(
        first[0].spec && first[0].write,
        "a new part is written whole"
    );
    let sent = first[0].status.clone();
    assert_eq!(
        sent.observed_generation, None,
        "no status subresource: no generation"
    );

    // Stored as written: nothing to write, whatever the time.
    let existing = stored(sent.clone(), 0, 1);
    let later = ts("2026-03-01T05:00:00Z");
    let again = plan_parts(
        "shop",
        vec![status.clone()],
        |_| Some(existing.clone()),
        &written,
        later,
    );
    assert_eq!((again[0].spec, again[0].write), (false, false));

    // The store has not caught up with the last write yet: not written twice.
    let written = WrittenDigests::default();
    written.written(first[0].key.clone(), &sent);
    let behind = plan_parts("shop", vec![status.clone()], |_| None, &written, now);
    assert_eq!(
        (behind[0].spec, behind[0].write),
        (true, true),
        "not in the store yet: written again, spec and status together"
    );

    // Split in two: both parts say so.
    let parts = plan_parts(
        "shop",
        vec![status.clone(), status],
        |_| Some(existing.clone()),
        &WrittenDigests::default(),
        now,
    );
    let truncated: Vec<(String, bool, String)> = parts
        .iter()
        .map(|p| {
            let c = p
                .status
                .conditions
                .iter()
                .find(|c| c.type_ == "Truncated")
                .map(|c| c.message.clone())
                .unwrap_or_default();
            (p.name.clone(), p.spec, c)
        })
        .collect();
    assert_eq!(
        truncated,
        [
            (
                "inventory".to_string(),
                true,
                "the inventory passes 512 KiB; this is part 1 of 2".to_string()
            ),
            (
                "inventory-1".to_string(),
                true,
                "the inventory passes 512 KiB; this is part 2 of 2".to_string()
            ),
        ]
    );
}
