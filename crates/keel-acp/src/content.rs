//! A prompt's content blocks as the text of keel's user message: text blocks as they are,
//! embedded text resources (the editor's `@file` context) as a fenced block naming their URI,
//! resource links as a line naming them. Images and audio are not offered (the prompt
//! capabilities say so) and are refused, as is a prompt over [`MAX_PROMPT_BYTES`].

use agent_client_protocol::v1::schema::{ContentBlock, EmbeddedResourceResource};

/// The largest prompt keel takes, in bytes of text (context included).
pub const MAX_PROMPT_BYTES: usize = 1024 * 1024;

/// Why a prompt was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptError {
    /// Nothing to say.
    Empty,
    /// Over [`MAX_PROMPT_BYTES`]; how many bytes it had (at least).
    TooLarge(usize),
    /// A block keel does not take (image, audio, binary resource); its kind.
    Unsupported(&'static str),
}

impl std::fmt::Display for PromptError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PromptError::Empty => write!(f, "the prompt has no text"),
            PromptError::TooLarge(bytes) => write!(
                f,
                "the prompt is {bytes} bytes; keel takes at most {MAX_PROMPT_BYTES}"
            ),
            PromptError::Unsupported(kind) => write!(
                f,
                "keel takes text and embedded text resources, not {kind} content"
            ),
        }
    }
}

/// The user message `blocks` make.
pub fn prompt_text(blocks: &[ContentBlock]) -> Result<String, PromptError> {
    let mut parts: Vec<String> = Vec::with_capacity(blocks.len());
    let mut size = 0usize;
    for block in blocks {
        let part = match block {
            ContentBlock::Text(text) => text.text.clone(),
            ContentBlock::Resource(embedded) => match &embedded.resource {
                EmbeddedResourceResource::TextResourceContents(resource) => {
                    format!(
                        "<context uri=\"{}\">\n{}\n</context>",
                        resource.uri.replace('"', "%22"),
                        resource.text
                    )
                }
                _ => return Err(PromptError::Unsupported("binary resource")),
            },
            ContentBlock::ResourceLink(link) => format!("[{}]({})", link.name, link.uri),
            ContentBlock::Image(_) => return Err(PromptError::Unsupported("image")),
            ContentBlock::Audio(_) => return Err(PromptError::Unsupported("audio")),
            _ => return Err(PromptError::Unsupported("unknown")),
        };
        size = size.saturating_add(part.len());
        if size > MAX_PROMPT_BYTES {
            return Err(PromptError::TooLarge(size));
        }
        parts.push(part);
    }
    let text = parts.join("\n\n");
    if text.trim().is_empty() {
        return Err(PromptError::Empty);
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_client_protocol::v1::schema::{
        EmbeddedResource, ImageContent, TextContent, TextResourceContents,
    };

    fn text(t: &str) -> ContentBlock {
        ContentBlock::Text(TextContent::new(t))
    }

    #[test]
    fn text_and_embedded_context_join_in_order() {
        let resource = ContentBlock::Resource(EmbeddedResource::new(
            EmbeddedResourceResource::TextResourceContents(TextResourceContents::new(
                "fn main() {}",
                "file:///w/src/main.rs",
            )),
        ));
        let joined = prompt_text(&[text("explain"), resource]).unwrap();
        assert_eq!(
            joined,
            "explain\n\n<context uri=\"file:///w/src/main.rs\">\nfn main() {}\n</context>"
        );
    }

    #[test]
    fn empty_huge_and_image_prompts_are_refused() {
        assert_eq!(prompt_text(&[]), Err(PromptError::Empty));
        assert_eq!(prompt_text(&[text("  \n")]), Err(PromptError::Empty));
        let huge = "x".repeat(MAX_PROMPT_BYTES + 1);
        assert!(matches!(
            prompt_text(&[text(&huge)]),
            Err(PromptError::TooLarge(_))
        ));
        let image = ContentBlock::Image(ImageContent::new("aGk=", "image/png"));
        assert_eq!(
            prompt_text(&[text("look"), image]),
            Err(PromptError::Unsupported("image"))
        );
    }
}
