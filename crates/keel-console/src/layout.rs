//! The page shell every console page is drawn in: the document head (the embedded stylesheet
//! and script), a skip link, the navigation, the sign-out form, and the page's own body in
//! `<main>`. Everything given is escaped by maud; nothing stored is ever `PreEscaped`.

use maud::{DOCTYPE, Markup, html};

use crate::session::Viewer;

/// The sections of the console, as the navigation lists them: path and label.
pub const SECTIONS: [(&str, &str); 5] = [
    ("/runs", "Runs"),
    ("/conversations", "Conversations"),
    ("/usage", "Usage"),
    ("/schedules", "Schedules"),
    ("/channels", "Channels"),
];

/// A whole page titled `title`, for `viewer` (none on the sign-in and error pages), with
/// `body` as its main content.
pub fn page(title: &str, viewer: Option<&Viewer>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · keel" }
                link rel="stylesheet" href=(crate::assets::href("console.css"));
                script src=(crate::assets::href("console.js")) defer {}
            }
            body {
                a class="skip" href="#main" { "Skip to content" }
                header class="top" {
                    a class="brand" href="/" { "keel" }
                    @if let Some(viewer) = viewer {
                        nav aria-label="Sections" {
                            ul {
                                @for (path, label) in SECTIONS {
                                    li { a href=(path) { (label) } }
                                }
                            }
                        }
                        form class="sign-out" method="post" action="/sign-out" {
                            (csrf_field(viewer))
                            span class="who" { (viewer.who()) }
                            " "
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main id="main" tabindex="-1" { (body) }
            }
        }
    }
}

/// The hidden field that carries the viewer's CSRF token: put it in every form that posts.
pub fn csrf_field(viewer: &Viewer) -> Markup {
    html! { input type="hidden" name=(crate::csrf::FIELD) value=(viewer.csrf); }
}
