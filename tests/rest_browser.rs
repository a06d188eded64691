//! What a browser does with the REST endpoint, in a real headless Chromium: a page served from
//! another origin calls the endpoint with `fetch` (its `x-ms-version` header makes the browser ask
//! first, with a preflight), and the service's CORS rules decide whether the page may read the
//! answer. The page reports what it got back to the origin that served it.

mod common;

use std::time::Duration;

use common::rest::{exchange, server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// How long a page may take to load, call the endpoint and report.
const PAGE_TIMEOUT: Duration = Duration::from_secs(60);

/// Chromium, if it is installed.
fn chromium() -> Option<&'static str> {
    ["chromium", "chromium-browser"].into_iter().find(|name| {
        std::process::Command::new(name)
            .arg("--version")
            .output()
            .is_ok_and(|out| out.status.success())
    })
}

/// The page: it reads entity (p, r) of table Browser from the endpoint at `rest`, then reports
/// `ok:<N>` or `blocked:<error>` to its own origin.
fn page(rest: &str) -> String {
    format!(
        r#"<!doctype html><html><body><script>
const report = (text) => fetch("/report?" + encodeURIComponent(text));
fetch("http://{rest}/devstoreaccount1/Browser(PartitionKey='p',RowKey='r')", {{
  headers: {{"x-ms-version": "2019-02-02", "Accept": "application/json;odata=nometadata"}}
}})
  .then((answer) => answer.json())
  .then((entity) => report("ok:" + entity.N + ":" + (entity.RowKey || "")))
  .catch((error) => report("blocked:" + error.name));
</script></body></html>"#
    )
}

/// Serves `html` at `/` on `listener` and sends what each `/report?<text>` carries to `reports`.
async fn serve_page(listener: TcpListener, html: String, reports: mpsc::Sender<String>) {
    loop {
        let Ok((mut socket, _)) = listener.accept().await else {
            return;
        };
        let (html, reports) = (html.clone(), reports.clone());
        tokio::spawn(async move {
            let mut request = vec![0u8; 8192];
            let read = socket.read(&mut request).await.unwrap_or(0);
            let request = String::from_utf8_lossy(&request[..read]).into_owned();
            let target = request.split_whitespace().nth(1).unwrap_or("/").to_owned();
            let body = match target.strip_prefix("/report?") {
                Some(text) => {
                    let _ = reports.send(percent_decode(text)).await;
                    String::new()
                }
                None if target == "/" => html,
                None => String::new(),
            };
            let answer = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = socket.write_all(answer.as_bytes()).await;
        });
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        match (bytes[at], bytes.get(at + 1..at + 3)) {
            (b'%', Some(hex)) => {
                let hex = std::str::from_utf8(hex).unwrap_or("00");
                out.push(u8::from_str_radix(hex, 16).unwrap_or(b'?'));
                at += 3;
            }
            (byte, _) => {
                out.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Opens `url` in headless Chromium and returns what the page reports, or `None` if it reports
/// nothing in time.
async fn visit(browser: &str, url: &str, reports: &mut mpsc::Receiver<String>) -> Option<String> {
    let profile = tempfile::tempdir().unwrap();
    let chromium = std::process::Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(url)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start chromium");
    let _stop = Stop(chromium);
    let report = tokio::time::timeout(PAGE_TIMEOUT, reports.recv()).await;
    report.ok().flatten()
}

/// Kills and reaps the browser when dropped, whatever the test's outcome.
struct Stop(std::process::Child);

impl Drop for Stop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_from_an_allowed_origin_reads_the_endpoint_and_another_is_blocked() {
    let Some(browser) = chromium() else {
        assert!(
            std::env::var_os("TRESTLE_REQUIRE_BROWSER").is_none(),
            "chromium is not installed"
        );
        common::skip::skipped(
            "a_page_from_an_allowed_origin_reads_the_endpoint_and_another_is_blocked",
            "no headless browser: `apt-get install chromium`",
        );
        return;
    };
    let (_server, rest) = server(|_| {}).await;
    let allowed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let other = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (allowed_addr, other_addr) = (allowed.local_addr().unwrap(), other.local_addr().unwrap());

    let mut socket = TcpStream::connect(rest).await.unwrap();
    let rule = format!(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?><StorageServiceProperties><Cors><CorsRule>\
         <AllowedOrigins>http://{allowed_addr}</AllowedOrigins><AllowedMethods>GET</AllowedMethods>\
         <AllowedHeaders>x-ms-*,accept</AllowedHeaders><ExposedHeaders>x-ms-*</ExposedHeaders>\
         <MaxAgeInSeconds>60</MaxAgeInSeconds></CorsRule></Cors></StorageServiceProperties>"
    );
    let properties = "/devstoreaccount1/?restype=service&comp=properties";
    let (status, answer) = exchange(&mut socket, "PUT", properties, rule.as_bytes()).await;
    assert_eq!(status, 202, "{answer}");
    let table = br#"{"TableName":"Browser"}"#;
    assert_eq!(
        exchange(&mut socket, "POST", "/devstoreaccount1/Tables", table)
            .await
            .0,
        201
    );
    let entity = br#"{"PartitionKey":"p","RowKey":"r","N":7}"#;
    assert_eq!(
        exchange(&mut socket, "POST", "/devstoreaccount1/Browser", entity)
            .await
            .0,
        201
    );

    let rest = rest.to_string();
    let (report_to, mut reports) = mpsc::channel(4);
    tokio::spawn(serve_page(allowed, page(&rest), report_to.clone()));
    tokio::spawn(serve_page(other, page(&rest), report_to));

    let read = visit(browser, &format!("http://{allowed_addr}/"), &mut reports).await;
    assert_eq!(
        read.as_deref(),
        Some("ok:7:r"),
        "the allowed origin reads the entity"
    );
    let blocked = visit(browser, &format!("http://{other_addr}/"), &mut reports).await;
    assert_eq!(
        blocked.as_deref(),
        Some("blocked:TypeError"),
        "another origin's page is kept from the answer"
    );
}
