use super::*;
use proptest::prelude::*;

fn one(md: &str) -> String {
    let chunks = telegram_chunks(md);
    assert_eq!(chunks.len(), 1, "{chunks:?}");
    chunks.into_iter().next().unwrap_or_default()
}

/// Checks that every tag is closed in order and every `&` starts an entity.
fn balanced(html: &str) -> bool {
    let mut stack: Vec<String> = Vec::new();
    let mut rest = html;
    while let Some(i) = rest.find(['<', '&', '>']) {
        let tail = &rest[i..];
        if tail.starts_with('>') {
            return false;
        }
        if let Some(after) = tail.strip_prefix('&') {
            if !["lt;", "gt;", "amp;", "quot;"]
                .iter()
                .any(|e| after.starts_with(e))
            {
                return false;
            }
            rest = after;
            continue;
        }
        let Some(end) = tail.find('>') else {
            return false;
        };
        let tag = &tail[1..end];
        if let Some(name) = tag.strip_prefix('/') {
            if stack.pop().as_deref() != Some(name) {
                return false;
            }
        } else {
            let name = tag.split(' ').next().unwrap_or("");
            if !["b", "i", "code", "pre", "a"].contains(&name) {
                return false;
            }
            stack.push(name.to_string());
        }
        rest = &tail[end + 1..];
    }
    stack.is_empty()
}

#[test]
fn escapes_html_everywhere() {
    assert_eq!(one("a < b && c > d"), "a &lt; b &amp;&amp; c &gt; d");
    assert_eq!(one("`<tag>`"), "<code>&lt;tag&gt;</code>");
    assert_eq!(one("<b>not bold</b>"), "&lt;b&gt;not bold&lt;/b&gt;");
}

#[test]
fn converts_spans() {
    assert_eq!(
        one("**bold** and *it* and _it2_"),
        "<b>bold</b> and <i>it</i> and <i>it2</i>"
    );
    assert_eq!(one("**bold _inner_**"), "<b>bold <i>inner</i></b>");
    assert_eq!(one("use `x * y` here"), "use <code>x * y</code> here");
}

#[test]
fn leaves_lone_markers_and_snake_case_alone() {
    assert_eq!(one("2 * 3 = 6"), "2 * 3 = 6");
    assert_eq!(one("snake_case_name"), "snake_case_name");
    assert_eq!(one("**unclosed"), "**unclosed");
    assert_eq!(one("* item"), "* item");
    assert_eq!(one(r"\*literal\*"), "*literal*");
}

#[test]
fn converts_only_safe_links() {
    assert_eq!(
        one("see [the docs](https://x.io/a?b=1&c=\"2\")"),
        "see <a href=\"https://x.io/a?b=1&amp;c=&quot;2&quot;\">the docs</a>"
    );
    assert_eq!(
        one("[chat](tg://resolve?domain=x)"),
        "<a href=\"tg://resolve?domain=x\">chat</a>"
    );
    assert_eq!(
        one("[bad](javascript:alert(1))"),
        "[bad](javascript:alert(1))"
    );
    assert_eq!(
        one("[**b**](http://a.b)"),
        "<a href=\"http://a.b\"><b>b</b></a>"
    );
}

#[test]
fn converts_fenced_blocks() {
    assert_eq!(
        one("```rust\nfn a() -> &str { \"<\" }\n```"),
        "<pre><code class=\"language-rust\">fn a() -&gt; &amp;str { \"&lt;\" }</code></pre>"
    );
    assert_eq!(one("```\n**not bold**\n```"), "<pre>**not bold**</pre>");
    assert_eq!(
        one("```py\nunclosed"),
        "<pre><code class=\"language-py\">unclosed</code></pre>"
    );
}

#[test]
fn long_answers_split_into_valid_html_under_the_limit() {
    let code: String = (0..300)
        .map(|i| format!("if a < {i} && b > {i} {{ x(); }}\n"))
        .collect();
    let md = format!(
        "{}\n\n```rust\n{code}```\n\n{}",
        "**word** & more ".repeat(400),
        "end"
    );
    let chunks = telegram_chunks(&md);
    assert!(chunks.len() >= 3);
    for c in &chunks {
        assert!(c.chars().count() <= TELEGRAM_LIMIT);
        assert!(balanced(c), "unbalanced chunk: {}", &c[..c.len().min(300)]);
    }
    assert!(
        chunks
            .iter()
            .filter(|c| c.contains("language-rust"))
            .count()
            >= 2
    );
}

#[test]
fn markdown_v2_escapes_every_reserved_character() {
    assert_eq!(
        escape_markdown_v2("a_b*c[d]e(f)g~h`i>j#k+l-m=n|o{p}q.r!s\\t"),
        "a\\_b\\*c\\[d\\]e\\(f\\)g\\~h\\`i\\>j\\#k\\+l\\-m\\=n\\|o\\{p\\}q\\.r\\!s\\\\t"
    );
    assert_eq!(escape_markdown_v2("plain text é"), "plain text é");
}

proptest! {
    #[test]
    fn any_markdown_gives_balanced_html(md in "[a-z*_`\\[\\]()<>&:/ \n]{0,300}") {
        for c in telegram_chunks(&md) {
            prop_assert!(balanced(&c), "{:?} from {:?}", c, md);
        }
    }
}
