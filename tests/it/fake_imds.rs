//! A fake instance metadata service for spot notices (issue #35): IMDSv2's
//! token, `instance-life-cycle`, and the two notice paths
//! (`spot/instance-action`, `events/recommendations/rebalance`), each 404
//! until a test sets what it answers.

use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use crate::fake_aws::{read_request, reply};

/// What the fake answers, switchable while it serves.
#[derive(Default)]
pub struct Says {
    /// `spot/instance-action`'s body (`None`: 404).
    pub action: Option<String>,
    /// `events/recommendations/rebalance`'s body (`None`: 404).
    pub rebalance: Option<String>,
    /// GETs of `spot/instance-action` served.
    pub action_gets: usize,
    /// GETs without the token, refused.
    pub refused: usize,
}

/// The fake, on loopback.
pub struct FakeSpotImds {
    pub url: String,
    pub says: Arc<Mutex<Says>>,
}

impl FakeSpotImds {
    /// A fake whose instance is a `life_cycle` one (`spot`, `on-demand`).
    pub fn start(life_cycle: &str) -> FakeSpotImds {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let says = Arc::new(Mutex::new(Says::default()));
        let (s, life_cycle) = (says.clone(), life_cycle.to_string());
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let Some(req) = read_request(&conn) else {
                    continue;
                };
                if req.method == "PUT" && req.path == "/latest/api/token" {
                    match req.header("x-aws-ec2-metadata-token-ttl-seconds") {
                        Some(_) => reply(&conn, 200, "spot-token"),
                        None => reply(&conn, 400, ""),
                    }
                    continue;
                }
                let mut says = s.lock().unwrap();
                if req.header("x-aws-ec2-metadata-token") != Some("spot-token") {
                    says.refused += 1;
                    drop(says);
                    reply(&conn, 401, "");
                    continue;
                }
                let body = match req.path.as_str() {
                    "/latest/meta-data/instance-life-cycle" => Some(life_cycle.clone()),
                    "/latest/meta-data/spot/instance-action" => {
                        says.action_gets += 1;
                        says.action.clone()
                    }
                    "/latest/meta-data/events/recommendations/rebalance" => says.rebalance.clone(),
                    _ => None,
                };
                drop(says);
                match body {
                    Some(b) => reply(&conn, 200, &b),
                    None => reply(&conn, 404, ""),
                }
            }
        });
        FakeSpotImds { url, says }
    }

    /// Answers `spot/instance-action` with `body` from now on.
    pub fn action(&self, body: &str) {
        self.says.lock().unwrap().action = Some(body.to_string());
    }

    /// Answers `events/recommendations/rebalance` with `body` from now on.
    pub fn rebalance(&self, body: &str) {
        self.says.lock().unwrap().rebalance = Some(body.to_string());
    }

    /// GETs of `spot/instance-action` served so far.
    pub fn action_gets(&self) -> usize {
        self.says.lock().unwrap().action_gets
    }
}
