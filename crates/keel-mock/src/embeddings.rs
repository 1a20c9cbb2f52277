//! Deterministic embeddings for tests: the mock's `/v1/embeddings` (OpenAI-compatible) answers
//! with [`embed`], a vector of hashed character trigrams of each word (with word-boundary
//! marks) and of word shapes, projected to [`DIMENSIONS`] and normalized to length 1.
//!
//! It is deliberately not a bag of the same words: `deployment` and `deploys` share most of
//! their trigrams with `deploy`, so they land near each other where a full-text index sees
//! three different words. Like a real embedding model, and unlike full text, it blurs numbers:
//! a number is only its shape, so `1248` and `8421` embed alike. Words of letters and digits
//! add their shape (`eu3` → `a9`) to their trigrams.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// The length of every mock embedding.
pub const DIMENSIONS: usize = 256;

/// Words too common to say anything: they add nothing to an embedding.
const STOPWORDS: &[&str] = &[
    "a", "an", "and", "are", "at", "do", "does", "for", "i", "in", "is", "it", "my", "of", "on",
    "or", "our", "s", "the", "to", "we", "what", "which", "who", "where", "when", "how", "with",
    "you", "your",
];

/// The mock embedding of `text`: deterministic, length 1 (all zeros for a text without
/// words).
pub fn embed(text: &str) -> Vec<f32> {
    let mut vector = vec![0f32; DIMENSIONS];
    let lower = text.to_lowercase();
    for word in lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty() && !STOPWORDS.contains(w))
    {
        if word.chars().all(|c| c.is_ascii_digit()) {
            add(&mut vector, &shape(word), 0.5);
            continue;
        }
        let marked: Vec<char> = format!("^{word}$").chars().collect();
        for trigram in marked.windows(3) {
            add(&mut vector, &trigram.iter().collect::<String>(), 1.0);
        }
        if word.chars().any(|c| c.is_ascii_digit()) {
            add(&mut vector, &shape(word), 0.5);
        }
    }
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|x| *x /= norm);
    }
    vector
}

/// A word's shape: letters as `a`, digits as `9`, runs collapsed (`eu3` → `a9`).
fn shape(word: &str) -> String {
    let mut shape = String::from("shape:");
    for c in word.chars() {
        let class = if c.is_ascii_digit() { '9' } else { 'a' };
        if !shape.ends_with(class) {
            shape.push(class);
        }
    }
    shape
}

/// Adds `weight` to the feature's bucket, with a sign from another bit of its hash (so
/// colliding features cancel instead of piling up).
fn add(vector: &mut [f32], feature: &str, weight: f32) {
    let hash = fnv1a(feature.as_bytes());
    let bucket = (hash % DIMENSIONS as u64) as usize;
    let sign = if (hash >> 32) & 1 == 0 { 1.0 } else { -1.0 };
    vector[bucket] += sign * weight;
}

/// FNV-1a, 64 bits: stable across platforms and releases, unlike the standard hasher.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// `POST /v1/embeddings`: `input` is a string or a list of strings; the answer lists their
/// embeddings in order, as the OpenAI API does.
pub(crate) async fn answer(Json(body): Json<Value>) -> Response {
    let inputs: Vec<String> = match &body["input"] {
        Value::String(text) => vec![text.clone()],
        Value::Array(items) if items.iter().all(Value::is_string) => items
            .iter()
            .filter_map(|item| item.as_str().map(str::to_string))
            .collect(),
        _ => {
            let error = json!({"error": {
                "message": "`input` must be a string or a list of strings",
                "type": "invalid_request_error"
            }});
            return (StatusCode::BAD_REQUEST, Json(error)).into_response();
        }
    };
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, text)| json!({"object": "embedding", "index": index, "embedding": embed(text)}))
        .collect();
    let tokens: usize = inputs.iter().map(|t| t.split_whitespace().count()).sum();
    Json(json!({
        "object": "list",
        "data": data,
        "model": body["model"].as_str().unwrap_or("mock-embed"),
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens}
    }))
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cosine(a: &[f32], b: &[f32]) -> f32 {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }

    #[test]
    fn same_text_same_vector_of_length_one() {
        let a = embed("My deploy target is eu-west-3");
        assert_eq!(a, embed("My deploy target is eu-west-3"));
        assert_eq!(a.len(), DIMENSIONS);
        assert!((cosine(&a, &a) - 1.0).abs() < 1e-5);
        assert!(embed("  !! ").iter().all(|x| *x == 0.0));
        assert_eq!(embed("incident 1248"), embed("incident 8421"));
    }

    #[test]
    fn word_variants_are_near_and_unrelated_texts_far() {
        let fact = embed("the deploy target is eu-west-3");
        let variant = embed("where are deployments targeted?");
        let unrelated = embed("lunch is at noon on fridays");
        assert!(cosine(&fact, &variant) > 0.2, "{}", cosine(&fact, &variant));
        assert!(
            cosine(&fact, &unrelated) < 0.2,
            "{}",
            cosine(&fact, &unrelated)
        );
    }
}
