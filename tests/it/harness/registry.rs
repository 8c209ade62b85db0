//! A tiny OCI registry on loopback, for the image-architecture tests.

use std::io::{BufRead, Write};

/// A registry on loopback serving one image index per repository, with the
/// architectures given.
pub fn tiny_registry(images: &[(&str, &[&str])]) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let images: Vec<(String, String)> = images
        .iter()
        .map(|(name, arches)| {
            let manifests: Vec<String> = arches
                .iter()
                .map(|a| {
                    format!(
                        r#"{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:{:0>64}","size":1,"platform":{{"architecture":"{a}","os":"linux"}}}}"#,
                        a.len()
                    )
                })
                .collect();
            (
                format!("/v2/{name}/manifests/v1"),
                format!(
                    r#"{{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{}]}}"#,
                    manifests.join(",")
                ),
            )
        })
        .collect();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let mut reader = std::io::BufReader::new(conn.try_clone().unwrap());
            let mut line = String::new();
            let _ = reader.read_line(&mut line);
            let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
            loop {
                let mut h = String::new();
                if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                    break;
                }
            }
            let mut conn = conn;
            let reply = match images.iter().find(|(p, _)| *p == path) {
                Some((_, body)) => format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/vnd.oci.image.index.v1+json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                ),
                None => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    .to_string(),
            };
            let _ = conn.write_all(reply.as_bytes());
        }
    });
    addr.to_string()
}
