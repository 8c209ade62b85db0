//! Image architectures from a real registry on loopback (Debian's
//! `docker-registry`), holding images the test pushes: a two-architecture
//! index, a single-architecture image, a tag pushed again, and the same
//! images behind a bearer-token front (a test token endpoint).

use std::io::Write;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};

use crate::fake_aws::{Request, read_request};
use crate::harness::*;

/// A `docker-registry serve` of this test's own.
struct Registry {
    child: Child,
    addr: String,
    _dir: TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Registry {
    fn start() -> Registry {
        let bin = "/usr/bin/docker-registry";
        assert!(
            std::path::Path::new(bin).exists(),
            "{bin} is missing: install Debian's docker-registry package (make test does: scripts/deps.sh)"
        );
        let dir = TempDir::new();
        let addr = format!("127.0.0.1:{}", free_port());
        let config = dir.write(
            "config.yml",
            &format!(
                "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {addr}\n",
                dir.path("data").display()
            ),
        );
        let child = Command::new(bin)
            .args(["serve", &config])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let r = Registry {
            child,
            addr,
            _dir: dir,
        };
        wait_until("the registry answers", 30.0, || {
            ureq::get(&format!("http://{}/v2/", r.addr)).call().is_ok()
        });
        r
    }

    /// Uploads `data` as a blob of `name`; its digest.
    fn blob(&self, name: &str, data: &[u8]) -> String {
        let digest = format!(
            "sha256:{}",
            ring::digest::digest(&ring::digest::SHA256, data)
                .as_ref()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        );
        let start = ureq::post(&format!("http://{}/v2/{name}/blobs/uploads/", self.addr))
            .call()
            .unwrap();
        let location = start.header("location").unwrap().to_string();
        let url = if location.starts_with("http") {
            location
        } else {
            format!("http://{}{location}", self.addr)
        };
        let sep = if url.contains('?') { '&' } else { '?' };
        ureq::put(&format!("{url}{sep}digest={digest}"))
            .set("content-type", "application/octet-stream")
            .send_bytes(data)
            .unwrap();
        digest
    }

    /// Pushes a manifest of `name` for `arch` (its config blob saying so);
    /// its digest and size.
    fn image(&self, name: &str, arch: &str) -> (String, usize) {
        let config = format!(
            r#"{{"architecture":"{arch}","os":"linux","rootfs":{{"type":"layers","diff_ids":[]}}}}"#
        );
        let config_digest = self.blob(name, config.as_bytes());
        let layer = format!("layer for {arch}");
        let layer_digest = self.blob(name, layer.as_bytes());
        let manifest = format!(
            r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{config_digest}","size":{}}},"layers":[{{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":"{layer_digest}","size":{}}}]}}"#,
            config.len(),
            layer.len()
        );
        let digest = format!(
            "sha256:{}",
            ring::digest::digest(&ring::digest::SHA256, manifest.as_bytes())
                .as_ref()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        );
        self.put_manifest(
            name,
            &digest,
            "application/vnd.oci.image.manifest.v1+json",
            &manifest,
        );
        (digest, manifest.len())
    }

    fn put_manifest(&self, name: &str, reference: &str, media_type: &str, body: &str) {
        ureq::put(&format!(
            "http://{}/v2/{name}/manifests/{reference}",
            self.addr
        ))
        .set("content-type", media_type)
        .send_string(body)
        .unwrap();
    }

    /// Tags `tag` of `name` as an index of one image per architecture.
    fn index(&self, name: &str, tag: &str, arches: &[&str]) {
        let items: Vec<String> = arches
            .iter()
            .map(|a| {
                let (digest, size) = self.image(name, a);
                format!(
                    r#"{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"{digest}","size":{size},"platform":{{"architecture":"{a}","os":"linux"}}}}"#
                )
            })
            .collect();
        let index = format!(
            r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{}]}}"#,
            items.join(",")
        );
        self.put_manifest(name, tag, "application/vnd.oci.image.index.v1+json", &index);
    }

    /// Tags `tag` of `name` as a single manifest for `arch`.
    fn single(&self, name: &str, tag: &str, arch: &str) {
        let (digest, _) = self.image(name, arch);
        let manifest = ureq::get(&format!(
            "http://{}/v2/{name}/manifests/{digest}",
            self.addr
        ))
        .set("accept", "application/vnd.oci.image.manifest.v1+json")
        .call()
        .unwrap()
        .into_string()
        .unwrap();
        self.put_manifest(
            name,
            tag,
            "application/vnd.oci.image.manifest.v1+json",
            &manifest,
        );
    }
}

/// A front for `registry` that wants `Authorization: Basic BASIC` (as ECR
/// does, with the token ECR's GetAuthorizationToken gives); its address.
fn basic_front(registry: &str, basic: &'static str) -> String {
    let front = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = front.local_addr().unwrap().to_string();
    let registry = registry.to_string();
    std::thread::spawn(move || {
        for conn in front.incoming().flatten() {
            let Some(req) = read_request(&conn) else {
                continue;
            };
            forward(&conn, &req, &registry, &format!("Basic {basic}"), None);
        }
    });
    addr
}

/// A front for `registry` that wants a bearer token from its own token
/// endpoint (realm), as Docker Hub and GHCR do; the address to pull from.
fn bearer_front(registry: &str) -> String {
    let tokens = TcpListener::bind("127.0.0.1:0").unwrap();
    let realm = format!("http://{}/token", tokens.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in tokens.incoming().flatten() {
            let Some(req) = read_request(&conn) else {
                continue;
            };
            let ok =
                req.path.contains("service=test-registry") && req.path.contains("scope=repository");
            let body = if ok {
                r#"{"token":"tok-for-orca"}"#
            } else {
                "{}"
            };
            let _ = write!(
                &conn,
                "HTTP/1.1 {} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                if ok { 200 } else { 400 },
                body.len()
            );
        }
    });
    let front = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = front.local_addr().unwrap().to_string();
    let registry = registry.to_string();
    std::thread::spawn(move || {
        for conn in front.incoming().flatten() {
            let Some(req) = read_request(&conn) else {
                continue;
            };
            forward(&conn, &req, &registry, "Bearer tok-for-orca", Some(&realm));
        }
    });
    addr
}

/// Forwards `req` to `registry` if it carries `Authorization: WANT`; else
/// 401, with a bearer challenge naming `realm` if given.
fn forward(
    mut conn: &std::net::TcpStream,
    req: &Request,
    registry: &str,
    want: &str,
    realm: Option<&str>,
) {
    if req.header("authorization") != Some(want) {
        let challenge = realm
            .map(|r| {
                format!(
                    "WWW-Authenticate: Bearer realm=\"{r}\",service=\"test-registry\",scope=\"repository:team/multi:pull\"\r\n"
                )
            })
            .unwrap_or_default();
        let _ = write!(
            conn,
            "HTTP/1.1 401 Unauthorized\r\n{challenge}Content-Length: 0\r\nConnection: close\r\n\r\n"
        );
        return;
    }
    let mut get = ureq::get(&format!("http://{registry}{}", req.path));
    if let Some(a) = req.header("accept") {
        get = get.set("accept", a);
    }
    let (status, ct, body) = match get.call() {
        Ok(r) => (
            r.status(),
            r.content_type().to_string(),
            r.into_string().unwrap_or_default(),
        ),
        Err(ureq::Error::Status(s, r)) => (s, String::new(), r.into_string().unwrap_or_default()),
        Err(_) => (502, String::new(), String::new()),
    };
    let _ = write!(
        conn,
        "HTTP/1.1 {status} X\r\nContent-Type: {ct}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

fn pool(name: &str, image: &str) -> String {
    format!(
        "[pools.{name}]\ntypes = [{{ type = \"small\", wait = 0 }}]\nlocations = [\"here\"]\nimage = \"{image}\"\n\n[pipelines.{name}-job]\ncommand = \"true\"\nplacement = \"worker:{name}\"\n\n"
    )
}

fn made(db: &TestDb, pool: &str) -> i64 {
    db.client()
        .query_one(
            "SELECT count(*) FROM orca.pool_machines WHERE pool = $1",
            &[&pool],
        )
        .unwrap()
        .get(0)
}

fn status(db: &TestDb, pool: &str) -> String {
    db.client()
        .query_one("SELECT status FROM orca.pools WHERE name = $1", &[&pool])
        .unwrap()
        .get(0)
}

#[test]
fn image_architectures_come_from_a_real_registry() {
    let reg = Registry::start();
    let host = host_arch();
    let other = if host == "arm64" { "amd64" } else { "arm64" };
    reg.index("team/multi", "v1", &[other, host]);
    reg.single("team/single", "v1", "s390x");
    reg.single("team/moving", "v1", "s390x");
    let front = bearer_front(&reg.addr);
    let closed = format!("127.0.0.1:{}", free_port());
    let db = TestDb::new();
    let dir = TempDir::new();
    let file = [
        pool("multi", &format!("{}/team/multi:v1", reg.addr)),
        pool("single", &format!("{}/team/single:v1", reg.addr)),
        pool("moving", &format!("{}/team/moving:v1", reg.addr)),
        pool("bearer", &format!("{front}/team/multi:v1")),
        pool("gone", &format!("{closed}/team/multi:v1")),
    ]
    .concat();
    db.register(&dir, &file);
    for p in ["multi", "single", "moving", "bearer", "gone"] {
        db.queue(&format!("{p}-job"));
    }
    let mut s = db.scheduler(
        &dir,
        &[
            ("ORCA_POOL_SCALE_SECONDS", "0.3"),
            ("ORCA_POOL_GROW_AFTER", "0"),
            ("ORCA_POOL_TRY_SECONDS", "0.3"),
            ("ORCA_POOL_IMAGE_SECONDS", "1"),
        ],
    );
    // An index with the host's architecture: a machine, anonymously and
    // behind a bearer token.
    wait_until("machines for the multi-arch image", 40.0, || {
        made(&db, "multi") == 1 && made(&db, "bearer") == 1
    });
    // A single manifest: its config blob says s390x; the type is skipped.
    wait_until("the single-arch image's type is skipped", 40.0, || {
        status(&db, "single").contains(&format!("has no {host} variant (it has s390x)"))
            && status(&db, "moving").contains("it has s390x")
    });
    assert_eq!(made(&db, "single"), 0);
    // A registry that can't be read: said, and nothing skipped on a guess.
    wait_until("the unreadable registry is named", 40.0, || {
        status(&db, "gone").contains("can't be read") && made(&db, "gone") == 1
    });
    // The tag is pushed again with the host's architecture: read again after
    // ORCA_POOL_IMAGE_SECONDS, the pool gets its machine.
    reg.index("team/moving", "v1", &[host]);
    wait_until("the re-pushed tag is read again", 40.0, || {
        made(&db, "moving") == 1
    });
    s.stop();
}

#[test]
fn an_ecr_image_is_pulled_with_a_signed_ecr_token() {
    let reg = Registry::start();
    reg.index("team/worker", "v1", &[host_arch()]);
    // ECR's token, as the fake's GetAuthorizationToken gives it: AWS:<password>.
    let front = basic_front(&reg.addr, "QVdTOmZha2UtZWNyLXBhc3N3b3Jk");
    let ecr = crate::fake_aws::FakeEc2::start("AKIDECR", "ecr-secret");
    let (db, dir) = setup(&pool(
        "p",
        "123456789012.dkr.ecr.eu-west-1.amazonaws.com/team/worker:v1",
    ));
    db.queue("p-job");
    let front_url = format!("http://{front}");
    let mut s = db.scheduler(
        &dir,
        &[
            ("ORCA_POOL_SCALE_SECONDS", "0.3"),
            ("ORCA_POOL_GROW_AFTER", "0"),
            ("ORCA_POOL_TRY_SECONDS", "0.3"),
            ("ORCA_ECR_ENDPOINT", ecr.url.as_str()),
            ("ORCA_ECR_REGISTRY_ENDPOINT", front_url.as_str()),
            ("AWS_ACCESS_KEY_ID", "AKIDECR"),
            ("AWS_SECRET_ACCESS_KEY", "ecr-secret"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ],
    );
    wait_until("a machine for the ECR image", 40.0, || made(&db, "p") == 1);
    let st = ecr.state.lock().unwrap();
    assert!(
        st.log
            .iter()
            .any(|(action, key, good)| action == "GetAuthorizationToken"
                && key == "AKIDECR"
                && *good)
    );
    assert!(
        st.log.iter().all(|l| l.2),
        "a request's signature did not check out"
    );
    drop(st);
    s.stop();
    assert!(!s.output().contains("ecr-secret"));
}
