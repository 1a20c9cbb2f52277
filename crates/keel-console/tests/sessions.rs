//! Signing in and out over real HTTP: the session cookie's flags, a wrong or revoked key,
//! expiry, and forms refused without their CSRF token or from another origin.

mod common;

use chrono::TimeDelta;
use common::Daemon;
use keel_platform::PlatformStore;

#[tokio::test]
async fn a_key_signs_in_with_a_strict_httponly_cookie_and_signs_out() {
    let daemon = Daemon::start().await;
    let key = daemon.key(Some("ann"), false).await;
    let mut browser = daemon.browser();

    let first = browser.get("/runs/r1?state=running").await;
    assert_eq!(first.status, 303);
    assert_eq!(first.location(), "/sign-in?next=/runs/r1%3Fstate%3Drunning");

    let signed = browser.sign_in(&key).await;
    assert_eq!(signed.status, 303, "{}", signed.body);
    assert_eq!(signed.location(), "/");
    let cookie = signed
        .set_cookies()
        .into_iter()
        .find(|line| line.starts_with("keel_session="))
        .expect("a session cookie");
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert!(
        cookie.contains("Path=/") && cookie.contains("Max-Age=3600"),
        "{cookie}"
    );
    // Plain HTTP on loopback: a Secure cookie would not come back.
    assert!(!cookie.contains("Secure"), "{cookie}");
    assert!(!cookie.contains(&key) && !signed.location().contains(&key));

    let home = browser.get("/").await;
    assert_eq!(home.status, 200);
    assert!(home.body.contains("ann"));
    let policy = home.headers["content-security-policy"].to_str().unwrap();
    assert!(policy.contains("script-src 'self'") && !policy.contains("unsafe-inline"));
    assert_eq!(home.headers["cache-control"], "no-store");

    let csrf = home.field("csrf").unwrap();
    let out = browser.post("/sign-out", &[("csrf", &csrf)], &[]).await;
    assert_eq!((out.status, out.location()), (303, "/sign-in"));
    assert!(
        browser
            .cookies
            .iter()
            .all(|(name, _)| name != "keel_session")
    );
    assert_eq!(browser.get("/").await.status, 303);
}

#[tokio::test]
async fn the_session_cookie_is_secure_anywhere_but_loopback_plain_http() {
    let daemon = Daemon::start().await;
    let key = daemon.key(Some("ann"), false).await;
    let mut browser = daemon.browser();
    let proxied = [("x-forwarded-proto", "https")];
    let form = browser.post("/sign-in", &[], &[]).await;
    assert_eq!(form.status, 403, "no sign-in cookie, no sign-in");
    let page = browser.get_with("/sign-in", &proxied).await;
    let line = page.set_cookies().remove(0);
    assert!(
        line.starts_with("__Host-keel_sign_in=") && line.contains("; Secure"),
        "{line}"
    );
    let token = line
        .split(';')
        .next()
        .unwrap()
        .split_once('=')
        .unwrap()
        .1
        .to_string();
    assert_eq!(
        browser.cookies,
        vec![("__Host-keel_sign_in".into(), token.clone())]
    );
    let signed = browser
        .post("/sign-in", &[("csrf", &token), ("key", &key)], &proxied)
        .await;
    assert_eq!(signed.status, 303, "{}", signed.body);
    let cookie = signed
        .set_cookies()
        .into_iter()
        .find(|line| line.starts_with("__Host-keel_session="))
        .expect("a __Host- session cookie");
    assert!(
        cookie.contains("; Secure") && cookie.contains("HttpOnly"),
        "{cookie}"
    );
}

#[tokio::test]
async fn a_wrong_key_is_refused_and_starts_no_session() {
    let daemon = Daemon::start().await;
    let mut browser = daemon.browser();
    let refused = browser.sign_in("keel_not-a-key").await;
    assert_eq!(refused.status, 401);
    assert!(refused.body.contains("not a valid API key"));
    assert!(
        browser
            .cookies
            .iter()
            .all(|(name, _)| name != "keel_session")
    );
    assert!(
        !refused.body.contains("keel_not-a-key"),
        "the key is not echoed"
    );
}

#[tokio::test]
async fn a_revoked_key_ends_its_session_and_so_does_expiry() {
    let daemon = Daemon::start().await;
    let key = daemon.key(Some("ann"), false).await;
    let mut browser = daemon.browser();
    browser.sign_in(&key).await;
    assert_eq!(browser.get("/").await.status, 200);
    daemon
        .store
        .revoke_api_key(&daemon.key_id(&key).await, chrono::Utc::now())
        .await
        .unwrap();
    assert_eq!(browser.get("/").await.status, 303);

    let key = daemon.key(Some("bob"), false).await;
    browser.sign_in(&key).await;
    daemon.clock.advance(TimeDelta::minutes(59));
    assert_eq!(browser.get("/").await.status, 200);
    daemon.clock.advance(TimeDelta::minutes(2));
    assert_eq!(browser.get("/").await.status, 303);
}

#[tokio::test]
async fn a_form_without_its_token_or_from_another_origin_is_refused() {
    let daemon = Daemon::start().await;
    let key = daemon.key(Some("ann"), false).await;
    let mut browser = daemon.browser();
    browser.sign_in(&key).await;
    let csrf = browser.csrf().await;

    let none = browser.post("/sign-out", &[], &[]).await;
    assert_eq!(none.status, 403);
    let wrong = browser.post("/sign-out", &[("csrf", "0123")], &[]).await;
    assert_eq!(wrong.status, 403);
    let elsewhere = browser
        .post(
            "/sign-out",
            &[("csrf", &csrf)],
            &[("origin", "http://evil.example")],
        )
        .await;
    assert_eq!(elsewhere.status, 403);
    let cross = browser
        .post(
            "/sign-out",
            &[("csrf", &csrf)],
            &[("sec-fetch-site", "cross-site")],
        )
        .await;
    assert_eq!(cross.status, 403);
    assert_eq!(browser.get("/").await.status, 200, "still signed in");

    // Another session's token is not this one's.
    let mut other = daemon.browser();
    other.sign_in(&key).await;
    let theirs = other.csrf().await;
    assert_ne!(theirs, csrf);
    assert_eq!(
        browser
            .post("/sign-out", &[("csrf", &theirs)], &[])
            .await
            .status,
        403
    );
}

#[tokio::test]
async fn the_api_beside_the_console_is_unchanged() {
    let daemon = Daemon::start().await;
    let mut browser = daemon.browser();
    let api = browser.get("/v1/conversations").await;
    assert_eq!(api.status, 401);
    assert!(api.body.contains("\"unauthorized\""));
    let unknown = browser.get("/no-such-page").await;
    assert_eq!(unknown.status, 404);
    let css = browser.get("/assets/console.css").await;
    assert_eq!(css.status, 200);
    assert!(
        css.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/css")
    );
}
