//! The churn's pure parts on made-up input: a late window judged at the
//! middle of each step, a leaderless window from the leader's end to the
//! next lead and a pass.

use super::*;

#[test]
fn a_late_window_is_judged_at_the_middle_of_each_step() {
    let t: Vec<f64> = steps(10.0, 10.1).collect();
    assert_eq!(t.len(), 2);
    assert!((t[0] - 10.025).abs() < 1e-9 && (t[1] - 10.075).abs() < 1e-9);
    assert_eq!(steps(10.0, 10.0).count(), 0);
    assert!(in_windows(10.5, &[(10.0, 11.0)]) && !in_windows(11.0, &[(10.0, 11.0)]));
    assert_eq!(pool_of("orca-cl1-998"), "cl1");
}

#[test]
fn a_leaderless_window_lasts_from_the_leader_s_end_to_the_next_lead_and_a_pass() {
    // 1 leads at 0 and is killed at 10; 2 leads at 14 and drains at 20,
    // 3 leading at once; 3 killed at 30, 4 leading at 30.2 and killed
    // at 30.5 (within the pass after its lead: one window); 5 leads at
    // 35.
    let leads = [(0.0, 1), (14.0, 2), (20.2, 3), (30.2, 4), (35.0, 5)];
    let ends = [(30.5, 4), (10.0, 1), (20.0, 2), (30.0, 3)];
    let w = leaderless_windows(&ends, &leads, 0.5);
    assert_eq!(w, vec![(10.0, 14.5), (20.0, 20.7), (30.0, 35.5)]);
    // Killed with no lead after: open to the end.
    assert_eq!(
        leaderless_windows(&[(5.0, 1)], &[(0.0, 1)], 0.5),
        vec![(5.0, f64::INFINITY)]
    );
    // A scheduler whose lead was taken over (2 at 12) before it drained
    // (at 13) opens no window.
    assert_eq!(
        leaderless_windows(&[(13.0, 1)], &[(0.0, 1), (12.0, 2)], 0.5),
        vec![]
    );
    assert_eq!(pid_named("scheduler 7 on h pid 4242, image -"), Some(4242));
    assert_eq!(pid_named("scheduler 7 on h pid 99: a deploy"), Some(99));
    assert_eq!(pid_named("no pid here"), None);
    assert!(names("removing machine orca-cl0-98: idle", "orca-cl0-98"));
    assert!(names("machine orca-cl0-98", "orca-cl0-98"));
    assert!(!names("removing machine orca-cl0-980: idle", "orca-cl0-98"));
    assert_eq!(overlap((18.0, 27.0), &[(20.0, 25.0)]), 5.0);
    assert_eq!(overlap((21.0, 22.0), &[(20.0, 25.0)]), 1.0);
    assert_eq!(overlap((26.0, 28.0), &[(20.0, 25.0)]), 0.0);
}
