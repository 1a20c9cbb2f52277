//! The front matter of a `SKILL.md`: the lines between a first `---` line and the next, holding
//! `name`, `description` and `triggers`. keel reads this small subset of YAML itself — scalar
//! `key: value` lines (optionally quoted), and `triggers` as an inline list (`[a, "b c"]`) or a
//! block list (`- a` lines) — and refuses anything else with the line it could not read, so a
//! skill never half-loads.

/// What the front matter says, and the body after it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FrontMatter {
    /// `name:`.
    pub name: Option<String>,
    /// `description:`.
    pub description: Option<String>,
    /// `triggers:`.
    pub triggers: Vec<String>,
}

/// Splits `text` into its front matter and its body.
pub fn parse(text: &str) -> Result<(FrontMatter, &str), String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.split_inclusive('\n');
    let first = lines.next().unwrap_or_default();
    if first.trim_end() != "---" {
        return Err("it does not begin with a `---` front matter line".into());
    }
    let mut consumed = first.len();
    let mut matter = FrontMatter::default();
    let mut in_triggers = false;
    for (number, line) in lines.enumerate() {
        consumed += line.len();
        let line_no = number + 2;
        let trimmed = line.trim_end_matches(['\n', '\r']);
        if trimmed.trim_end() == "---" {
            return Ok((matter, &text[consumed..]));
        }
        if trimmed.trim().is_empty() || trimmed.trim_start().starts_with('#') {
            continue;
        }
        if let Some(item) = trimmed.trim_start().strip_prefix("- ") {
            if !in_triggers {
                return Err(format!("line {line_no}: a list item outside `triggers`"));
            }
            matter.triggers.push(unquote(item.trim(), line_no)?);
            continue;
        }
        in_triggers = false;
        let Some((key, value)) = trimmed.split_once(':') else {
            return Err(format!("line {line_no}: expected `key: value`"));
        };
        let value = value.trim();
        match key.trim() {
            "name" => matter.name = Some(unquote(value, line_no)?),
            "description" => matter.description = Some(unquote(value, line_no)?),
            "triggers" if value.is_empty() => in_triggers = true,
            "triggers" => matter.triggers = inline_list(value, line_no)?,
            // Other keys (license, version, ...) are the skill author's; keel ignores them.
            _ => {}
        }
    }
    Err("its front matter has no closing `---` line".into())
}

fn unquote(value: &str, line_no: usize) -> Result<String, String> {
    for quote in ['"', '\''] {
        if let Some(rest) = value.strip_prefix(quote) {
            return rest
                .strip_suffix(quote)
                .map(str::to_string)
                .ok_or_else(|| format!("line {line_no}: an unclosed {quote} quote"));
        }
    }
    Ok(value.to_string())
}

fn inline_list(value: &str, line_no: usize) -> Result<Vec<String>, String> {
    let inner = value
        .strip_prefix('[')
        .and_then(|v| v.strip_suffix(']'))
        .ok_or_else(|| format!("line {line_no}: `triggers` must be a list: [a, b]"))?;
    let mut items = Vec::new();
    let mut current = String::new();
    let mut quote: Option<char> = None;
    for c in inner.chars() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, ',') => items.push(std::mem::take(&mut current)),
            _ => current.push(c),
        }
    }
    if quote.is_some() {
        return Err(format!("line {line_no}: an unclosed quote in `triggers`"));
    }
    items.push(current);
    Ok(items
        .into_iter()
        .map(|item| item.trim().to_string())
        .filter(|item| !item.is_empty())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_scalars_and_both_list_forms() {
        let text = "---\nname: deploy\ndescription: \"How we deploy: blue/green\"\ntriggers: [deploy, 'roll back', \"release, tag\"]\nlicense: MIT\n---\n# Deploy\nSteps.\n";
        let (matter, body) = parse(text).unwrap();
        assert_eq!(matter.name.as_deref(), Some("deploy"));
        assert_eq!(
            matter.description.as_deref(),
            Some("How we deploy: blue/green")
        );
        assert_eq!(matter.triggers, ["deploy", "roll back", "release, tag"]);
        assert_eq!(body, "# Deploy\nSteps.\n");
        let block = "---\r\nname: x\r\ntriggers:\r\n  - one\r\n  - \"two words\"\r\ndescription: d\r\n---\r\nbody";
        let (matter, body) = parse(block).unwrap();
        assert_eq!(matter.triggers, ["one", "two words"]);
        assert_eq!(matter.description.as_deref(), Some("d"));
        assert_eq!(body, "body");
    }

    #[test]
    fn refuses_what_it_cannot_read_with_the_line() {
        assert!(parse("no front matter").unwrap_err().contains("---"));
        assert!(parse("---\nname: x\n").unwrap_err().contains("closing"));
        assert!(
            parse("---\njust text\n---\n")
                .unwrap_err()
                .contains("line 2")
        );
        assert!(
            parse("---\n- stray\n---\n")
                .unwrap_err()
                .contains("outside")
        );
        assert!(
            parse("---\nname: \"open\n---\n")
                .unwrap_err()
                .contains("quote")
        );
        assert!(
            parse("---\ntriggers: deploy\n---\n")
                .unwrap_err()
                .contains("list")
        );
        assert!(parse("---\ntriggers: ['a]\n---\n").is_err());
        assert!(parse("").is_err());
    }
}
