//! Unit tests of the EC2 Query API's answers and requests (`aws`).

use super::*;

#[test]
fn error_answers_parse() {
    let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>InsufficientInstanceCapacity</Code><Message>We currently do not have sufficient c7g.large capacity in the Availability Zone you requested.</Message></Error></Errors><RequestID>ea966190-f9aa-478e-9ede-example</RequestID></Response>"#;
    let (code, message) = error_of(xml).unwrap();
    assert_eq!(code, "InsufficientInstanceCapacity");
    assert!(message.starts_with("We currently do not have"));
    assert!(error_of("not xml").is_none());
}

#[test]
fn an_attempt_is_sent_only_before_the_deadline_and_waits_at_least_the_floor() {
    let now = Instant::now();
    assert_eq!(attempt_wait(None, now), Some(ATTEMPT_TIMEOUT));
    assert_eq!(attempt_wait(Some(now), now), None);
    assert_eq!(
        attempt_wait(Some(now), now + Duration::from_millis(1)),
        None
    );
    // Just before the deadline: the floor, so a slow answer is heard.
    let soon = now + Duration::from_millis(100);
    assert_eq!(attempt_wait(Some(soon), now), Some(ATTEMPT_FLOOR));
    // Long before it: no more than an attempt's own timeout.
    let late = now + Duration::from_secs(60);
    assert_eq!(attempt_wait(Some(late), now), Some(ATTEMPT_TIMEOUT));
    let mid = now + Duration::from_secs(7);
    assert_eq!(attempt_wait(Some(mid), now), Some(Duration::from_secs(7)));
    assert!(ATTEMPT_FLOOR < ATTEMPT_TIMEOUT);
}

#[test]
fn spot_refusals_are_no_capacity_and_the_missing_role_says_what_to_do() {
    for code in [
        "InsufficientInstanceCapacity",
        "SpotMaxPriceTooLow",
        "MaxSpotInstanceCountExceeded",
        "UnfulfillableCapacity",
        "InsufficientCapacity",
    ] {
        assert!(is_capacity(code), "{code}");
    }
    assert!(!is_capacity("AuthFailure"));
    assert!(!is_capacity("InvalidParameterValue"));
    assert!(is_spot_role_missing(
        "AuthFailure.ServiceLinkedRoleCreationNotPermitted",
        "The provided credentials do not have permission to create the service-linked role for EC2 Spot Instances."
    ));
    assert!(is_spot_role_missing(
        "UnauthorizedOperation",
        "You are not authorized to create the service-linked role"
    ));
    assert!(!is_spot_role_missing(
        "UnauthorizedOperation",
        "not allowed"
    ));
    assert!(
        SPOT_ROLE_FIX
            .contains("aws iam create-service-linked-role --aws-service-name spot.amazonaws.com")
    );
}

#[test]
fn a_spot_launch_asks_a_one_time_terminating_instance() {
    let p = spot_params(Some("0.05"));
    let get = |k: &str| p.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(get("InstanceMarketOptions.MarketType"), Some("spot"));
    assert_eq!(
        get("InstanceMarketOptions.SpotOptions.SpotInstanceType"),
        Some("one-time")
    );
    assert_eq!(
        get("InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior"),
        Some("terminate")
    );
    assert_eq!(
        get("InstanceMarketOptions.SpotOptions.MaxPrice"),
        Some("0.05")
    );
    assert!(
        spot_params(None)
            .iter()
            .all(|(k, _)| !k.ends_with("MaxPrice"))
    );
}

#[test]
fn form_values_are_encoded() {
    assert_eq!(form_encode("a b/c=d&e~"), "a%20b%2Fc%3Dd%26e~");
}
