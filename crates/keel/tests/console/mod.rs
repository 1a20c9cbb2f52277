//! A headless Chromium for the console's browser tests: Debian's `chromedriver` started on a
//! free port (in its own process group, killed with the browser when dropped), a fresh profile
//! directory per browser, and WebDriver through fantoccini. Every wait polls the page with a
//! deadline; nothing sleeps for a fixed time. Screenshots go to `target/console-screenshots/`.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};

/// How long one wait on the page may take before the test fails.
pub const PAGE_DEADLINE: Duration = Duration::from_secs(60);

/// How often a wait looks at the page again.
const POLL: Duration = Duration::from_millis(50);

/// The flags Chromium needs here: root, no network, no GPU, a fresh profile.
const CHROMIUM_FLAGS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,1000",
];

/// A headless Chromium driven over WebDriver.
pub struct Browser {
    /// The WebDriver session.
    pub client: Client,
    driver: Option<Child>,
    _profile: tempfile::TempDir,
}

/// The chromedriver binary: `KEEL_CHROMEDRIVER`, else Debian's.
fn chromedriver() -> String {
    std::env::var("KEEL_CHROMEDRIVER").unwrap_or_else(|_| "/usr/bin/chromedriver".into())
}

/// The Chromium binary: `KEEL_CHROMIUM`, else Debian's.
fn chromium() -> String {
    std::env::var("KEEL_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into())
}

/// Where screenshots are saved: `target/console-screenshots/` (never committed).
pub fn screenshot_dir() -> PathBuf {
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let dir = tmp
        .parent()
        .map(|target| target.join("console-screenshots"))
        .unwrap_or_else(|| tmp.join("console-screenshots"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl Browser {
    /// Starts chromedriver on a free port and a headless Chromium with a fresh profile.
    pub async fn start() -> Browser {
        crate::common::bound::arm();
        let driver_path = chromedriver();
        assert!(
            std::path::Path::new(&driver_path).exists(),
            "{driver_path} is missing: install Debian's `chromium` and `chromium-driver` \
             (.ci/run does when it is missing)"
        );
        let profile = tempfile::tempdir().unwrap();
        let log = profile.path().join("chromedriver.log");
        // A free port: taken by a listener of ours, freed, then given to chromedriver (its own
        // report of the port it took is block-buffered on a pipe).
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let mut command = Command::new(&driver_path);
        command
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", log.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // Its own process group: dropping the browser kills chromedriver and the Chromium it
        // started together.
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let mut driver = command.spawn().unwrap();
        crate::common::bound::started(driver.id());
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            let exited = driver.try_wait().ok().flatten();
            if exited.is_some() || Instant::now() > deadline {
                kill_group(driver.id());
                panic!(
                    "chromedriver is not listening on port {port} ({exited:?}); its log:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            tokio::time::sleep(POLL).await;
        }
        let mut args: Vec<String> = CHROMIUM_FLAGS.iter().map(|s| s.to_string()).collect();
        args.push(format!(
            "--user-data-dir={}",
            profile.path().join("chromium").display()
        ));
        let mut capabilities = serde_json::Map::new();
        capabilities.insert("browserName".into(), "chrome".into());
        capabilities.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({ "binary": chromium(), "args": args }),
        );
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await;
        let client = match client {
            Ok(client) => client,
            Err(error) => {
                kill_group(driver.id());
                panic!("no WebDriver session with chromium: {error}");
            }
        };
        Browser {
            client,
            driver: Some(driver),
            _profile: profile,
        }
    }

    /// Opens `url`.
    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.unwrap();
    }

    /// The current URL.
    pub async fn url(&self) -> String {
        self.client.current_url().await.unwrap().to_string()
    }

    /// The page's visible text.
    pub async fn text(&self) -> String {
        match self.client.find(Locator::Css("body")).await {
            Ok(body) => body.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    /// The page's HTML as the browser holds it now.
    pub async fn source(&self) -> String {
        self.client.source().await.unwrap_or_default()
    }

    /// The first element matching `css`, waiting for it to appear.
    pub async fn wait_for(&self, css: &str) -> Element {
        let deadline = Instant::now() + PAGE_DEADLINE;
        loop {
            if let Ok(element) = self.client.find(Locator::Css(css)).await {
                return element;
            }
            if Instant::now() > deadline {
                panic!(
                    "no `{css}` on {} within {PAGE_DEADLINE:?}; the page shows:\n{}",
                    self.url().await,
                    self.text().await
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until some element matching `css` shows `text`; returns it.
    pub async fn wait_for_text(&self, css: &str, text: &str) -> Element {
        let deadline = Instant::now() + PAGE_DEADLINE;
        loop {
            if let Ok(found) = self.client.find_all(Locator::Css(css)).await {
                for element in found {
                    if element.text().await.is_ok_and(|shown| shown.contains(text)) {
                        return element;
                    }
                }
            }
            if Instant::now() > deadline {
                panic!(
                    "no `{css}` showing {text:?} on {} within {PAGE_DEADLINE:?}; the page \
                     shows:\n{}",
                    self.url().await,
                    self.text().await
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Waits until the page's text holds `text`.
    pub async fn wait_for_page_text(&self, text: &str) {
        self.wait_for_text("body", text).await;
    }

    /// Clicks the first element matching `css` (waiting for it).
    pub async fn click(&self, css: &str) {
        self.wait_for(css).await.click().await.unwrap();
    }

    /// Types `text` into the field matching `css` (waiting for it).
    pub async fn type_into(&self, css: &str, text: &str) {
        self.wait_for(css).await.send_keys(text).await.unwrap();
    }

    /// Runs `script` in the page and returns what it returns.
    pub async fn eval(&self, script: &str) -> serde_json::Value {
        self.client.execute(script, Vec::new()).await.unwrap()
    }

    /// Saves a screenshot of the page as `target/console-screenshots/{name}.png`.
    pub async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.unwrap();
        std::fs::write(screenshot_dir().join(format!("{name}.png")), png).unwrap();
    }

    /// Ends the WebDriver session (Chromium exits) and stops chromedriver.
    pub async fn close(mut self) {
        let _ = self.client.clone().close().await;
        self.stop_driver();
    }

    fn stop_driver(&mut self) {
        if let Some(mut driver) = self.driver.take() {
            kill_group(driver.id());
            let _ = driver.wait();
            crate::common::bound::ended(driver.id());
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        self.stop_driver();
    }
}

/// Kills the process group `pid` leads (chromedriver and the Chromium it started).
fn kill_group(pid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pid}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// Signs in on the console at `base` with `key`, as a person would: the sign-in form.
pub async fn sign_in(browser: &Browser, base: &str, key: &str) {
    browser.goto(&format!("{base}/sign-in")).await;
    browser.type_into("#key", key).await;
    browser.click("form.sign-in button[type=\"submit\"]").await;
    browser.wait_for("form.sign-out").await;
}

/// The CSRF token the page's forms carry.
pub async fn csrf_token(browser: &Browser) -> String {
    let token = browser
        .eval("const f = document.querySelector('input[name=\"csrf\"]'); return f ? f.value : '';")
        .await;
    token.as_str().unwrap_or_default().to_string()
}

/// POSTs `form` (urlencoded) to `path` from the page, with its cookies, as a script of the
/// page could; the status the console answered.
pub async fn post_from_page(browser: &Browser, path: &str, form: &str) -> u16 {
    let answered = browser
        .client
        .execute_async(
            "const done = arguments[arguments.length - 1];\
             fetch(arguments[0], {method: 'POST', body: arguments[1], redirect: 'manual',\
               headers: {'Content-Type': 'application/x-www-form-urlencoded'}})\
               .then(r => done(r.status), e => done(-1));",
            vec![path.into(), form.into()],
        )
        .await
        .unwrap();
    answered.as_u64().unwrap_or(0) as u16
}

/// A page of another origin (another port on loopback), served by the test: `body` as HTML to
/// every request, until dropped.
pub struct ForeignPage {
    /// Its address.
    pub url: String,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl ForeignPage {
    /// Serves `body` on a free port.
    pub fn serve(body: &str) -> ForeignPage {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = stop.clone();
        let page = format!("<!doctype html><html><body>{body}</body></html>");
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopping.load(std::sync::atomic::Ordering::SeqCst) {
                    return;
                }
                let Ok(mut stream) = stream else { continue };
                let mut request = [0u8; 4096];
                let _ = stream.read(&mut request);
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{page}",
                    page.len()
                );
            }
        });
        ForeignPage { url, stop }
    }
}

impl Drop for ForeignPage {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        // Wakes the accept loop so it sees the stop.
        let _ = std::net::TcpStream::connect(
            self.url.trim_start_matches("http://").trim_end_matches('/'),
        );
    }
}
