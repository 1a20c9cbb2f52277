//! What memory learns from a run once it has ended ([`keel_extensions::facts::Learn`]):
//!
//! - **scores** — with `[memory] importance = "model"`, the model rates the run's messages in
//!   one call and the ratings replace the rules' (`keel_extensions::importance`);
//! - **embeddings** — the messages that matter (importance ≥ [`EMBEDDED_IMPORTANCE`]) are
//!   embedded once, in one call, and kept, for vector recall in later sessions;
//! - **facts** — with `[memory] extract = true`, the model reads what the user said in the
//!   run and names the durable facts in it; each is remembered like a `remember` call, so a
//!   fact with the key of a current one supersedes it. Runs whose message came from an
//!   untrusted source (an email, an event) teach no facts.
//!
//! The model calls use the summary model (else the run's). Each step that fails is said in the
//! event and the others go on; the run's outcome was stored before any of it.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use keel_core::provider::{ChatRequest, NoDeltas, Provider, ToolChoice};
use keel_core::store::StoredMessage;
use keel_core::{Message, Role};
use keel_extensions::facts::{FactsRun, Learn};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::Memory;
use crate::facts::NewFact;

/// Messages at or above this importance are embedded after their run.
pub const EMBEDDED_IMPORTANCE: f32 = 0.5;

/// The most facts one run may teach.
pub const MAX_FACTS_PER_RUN: usize = 5;

/// The most messages of one run scored or embedded.
pub const MAX_MESSAGES_PER_RUN: usize = 32;

/// The most characters of one message the model or the embeddings endpoint is shown.
const MESSAGE_CHARS: usize = 4000;

/// How long one learning call may take.
pub const LEARN_CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The model memory asks, and what it asks it.
#[derive(Clone, Default)]
pub struct Learning {
    /// The model for extraction and scoring: a provider and a model name.
    pub model: Option<(Arc<dyn Provider>, String)>,
    /// Extract facts after each run (`[memory] extract = true`).
    pub extract: bool,
    /// Score messages with the model (`[memory] importance = "model"`).
    pub model_importance: bool,
}

const EXTRACT_PROMPT: &str = "You keep a list of durable facts about a user: their \
preferences, decisions, settings, names, places and plans that will still be true in later \
conversations. Read what the user said and answer with JSON only, of the form \
{\"facts\": [{\"key\": \"what it is about, one to six words\", \"text\": \"the fact, one \
sentence, about 'the user'\"}]}. Use the key of a known fact when a new fact replaces it. \
Leave out questions, small talk, passing requests and anything that is not about the user. \
At most five facts; {\"facts\": []} when there are none. Known facts:\n";

const SCORE_PROMPT: &str = "Rate how much each numbered message below matters for remembering \
later, from 0 (small talk, acknowledgements) to 1 (decisions, preferences, corrections, facts \
about the user or their work). Answer with JSON only: {\"scores\": [one number per message, \
in order]}.";

impl Memory {
    /// Sets what memory learns after each run, and with which model.
    pub fn with_learning(mut self, learning: Learning) -> Self {
        self.learning = learning;
        self
    }

    /// Asks the learning model; its answer's text.
    async fn ask(&self, system: String, input: String) -> Result<String, String> {
        let Some((provider, model)) = &self.learning.model else {
            return Err("no model to learn with".into());
        };
        let request = ChatRequest {
            model: model.clone(),
            messages: vec![Message::system(system).into(), Message::user(input).into()],
            tools: Arc::from(Vec::new()),
            tool_choice: ToolChoice::None,
            max_tokens: Some(1024),
            temperature: None,
            stream: false,
        };
        match tokio::time::timeout(LEARN_CALL_TIMEOUT, provider.chat(&request, &NoDeltas)).await {
            Ok(Ok(response)) => Ok(response.message.content),
            Ok(Err(e)) => Err(format!("{model}: {e}")),
            Err(_) => Err(format!(
                "{model}: no answer within {}s",
                LEARN_CALL_TIMEOUT.as_secs()
            )),
        }
    }

    /// The model's importance for each message, in order.
    async fn model_scores(&self, said: &[&StoredMessage]) -> Result<Vec<f32>, String> {
        let input: Vec<String> = said
            .iter()
            .enumerate()
            .map(|(i, m)| {
                format!(
                    "{}. [{}] {}",
                    i + 1,
                    m.message.role.as_str(),
                    excerpt(&m.message.content)
                )
            })
            .collect();
        let answer = self.ask(SCORE_PROMPT.into(), input.join("\n")).await?;
        #[derive(Deserialize)]
        struct Scores {
            scores: Vec<f32>,
        }
        let scores: Scores = parse_json(&answer)?;
        if scores.scores.len() != said.len() {
            return Err(format!(
                "the model rated {} messages of {}",
                scores.scores.len(),
                said.len()
            ));
        }
        if scores.scores.iter().any(|s| !s.is_finite()) {
            return Err("the model's ratings are not numbers".into());
        }
        Ok(scores.scores.iter().map(|s| s.clamp(0.0, 1.0)).collect())
    }

    /// The facts the model found in what the user said.
    async fn extracted(
        &self,
        user_id: &str,
        said: &[&StoredMessage],
    ) -> Result<Vec<Proposed>, String> {
        let known = self
            .store()
            .facts(user_id, false)
            .await
            .map_err(|e| e.to_string())?;
        let known: Vec<String> = known
            .iter()
            .rev()
            .take(50)
            .map(|fact| format!("- [{}] {}", fact.key.as_deref().unwrap_or(""), fact.text))
            .collect();
        let input: Vec<String> = said.iter().map(|m| excerpt(&m.message.content)).collect();
        let answer = self
            .ask(
                format!("{EXTRACT_PROMPT}{}", known.join("\n")),
                format!("What the user said:\n{}", input.join("\n---\n")),
            )
            .await?;
        #[derive(Deserialize)]
        struct Extracted {
            facts: Vec<Proposed>,
        }
        let extracted: Extracted = parse_json(&answer)?;
        Ok(extracted.facts)
    }
}

/// A fact the model proposed.
#[derive(Debug, Deserialize)]
struct Proposed {
    text: String,
    #[serde(default)]
    key: Option<String>,
}

#[async_trait]
impl Learn for Memory {
    async fn learn(&self, run: &FactsRun<'_>) -> Option<Value> {
        let said: Vec<&StoredMessage> = run
            .messages
            .iter()
            .filter(|m| matches!(m.message.role, Role::User | Role::Assistant))
            .filter(|m| !m.message.is_internal() && !m.message.content.trim().is_empty())
            .take(MAX_MESSAGES_PER_RUN)
            .collect();
        if said.is_empty() {
            return None;
        }
        let mut errors = Vec::new();
        let mut scores: Vec<f32> = said
            .iter()
            .map(|m| m.message.meta.importance.unwrap_or(0.3))
            .collect();
        let mut scored = 0;
        if self.learning.model_importance && self.learning.model.is_some() {
            match self.model_scores(&said).await {
                Ok(by_model) => {
                    let pairs: Vec<(u64, f32)> = said
                        .iter()
                        .map(|m| m.seq)
                        .zip(by_model.iter().copied())
                        .collect();
                    match self
                        .store()
                        .set_message_importance(run.session_id, &pairs)
                        .await
                    {
                        Ok(()) => {
                            scores = by_model;
                            scored = pairs.len();
                        }
                        Err(e) => errors.push(format!("cannot keep the scores: {e}")),
                    }
                }
                Err(e) => errors.push(format!("scoring failed: {e}")),
            }
        }
        let mut embedded = 0;
        if let Some(embedder) = self.embedder() {
            let chosen: Vec<(u64, String)> = said
                .iter()
                .zip(&scores)
                .filter(|(_, score)| **score >= EMBEDDED_IMPORTANCE)
                .map(|(m, _)| (m.seq, excerpt(&m.message.content)))
                .collect();
            if !chosen.is_empty() {
                let texts: Vec<String> = chosen.iter().map(|(_, t)| t.clone()).collect();
                match embedder.embed(&texts).await {
                    Ok(vectors) if vectors.len() == texts.len() => {
                        let vectors: Vec<(u64, Vec<f32>)> =
                            chosen.iter().map(|(seq, _)| *seq).zip(vectors).collect();
                        match self
                            .store()
                            .save_message_embeddings(run.session_id, embedder.model(), &vectors)
                            .await
                        {
                            Ok(()) => {
                                embedded = vectors.len();
                                self.message_vectors.drop_user(run.user_id);
                            }
                            Err(e) => errors.push(format!("cannot keep the embeddings: {e}")),
                        }
                    }
                    Ok(vectors) => errors.push(format!(
                        "the embeddings endpoint answered {} vectors for {} texts",
                        vectors.len(),
                        texts.len()
                    )),
                    Err(e) => errors.push(format!("embeddings failed: {e}")),
                }
            }
        }
        let mut remembered = Vec::new();
        let user_said: Vec<&StoredMessage> = said
            .iter()
            .copied()
            .filter(|m| m.message.role == Role::User)
            .collect();
        let extract = self.learning.extract && self.learning.model.is_some();
        if extract && !run.trusted {
            errors.push("untrusted message: no facts taken from it".into());
        } else if extract && !user_said.is_empty() {
            match self.extracted(run.user_id, &user_said).await {
                Ok(proposed) => {
                    if proposed.len() > MAX_FACTS_PER_RUN {
                        errors.push(format!(
                            "the model proposed {} facts; the first {MAX_FACTS_PER_RUN} were kept",
                            proposed.len()
                        ));
                    }
                    for fact in proposed.into_iter().take(MAX_FACTS_PER_RUN) {
                        let new = NewFact {
                            text: fact.text,
                            key: fact.key.filter(|k| !k.trim().is_empty()),
                            source_session: Some(run.session_id.to_string()),
                            source_seq: user_said.first().map(|m| m.seq),
                            ..NewFact::default()
                        };
                        match self.remember(run.user_id, new).await {
                            Ok(done) => remembered.push(json!({
                                "id": done.fact.id,
                                "key": done.fact.key,
                                "text": done.fact.text,
                                "superseded": done.superseded,
                            })),
                            Err(e) => errors.push(format!("a proposed fact was refused: {e}")),
                        }
                    }
                }
                Err(e) => errors.push(format!("extraction failed: {e}")),
            }
        }
        Some(json!({
            "user_id": run.user_id,
            "run_id": run.run_id,
            "remembered": remembered,
            "scored": scored,
            "embedded": embedded,
            "errors": errors,
        }))
    }
}

/// At most [`MESSAGE_CHARS`] of a message.
fn excerpt(text: &str) -> String {
    text.chars().take(MESSAGE_CHARS).collect()
}

/// The JSON object in a model's answer: the whole answer, or what is inside a code fence, or
/// from its first `{` to its last `}`.
fn parse_json<T: serde::de::DeserializeOwned>(answer: &str) -> Result<T, String> {
    let trimmed = answer.trim();
    let inner = match (trimmed.find('{'), trimmed.rfind('}')) {
        (Some(start), Some(end)) if start < end => &trimmed[start..=end],
        _ => trimmed,
    };
    serde_json::from_str(inner).map_err(|e| {
        let shown: String = answer.chars().take(200).collect();
        format!("the model's answer is not the JSON asked for ({e}): {shown:?}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    struct Scores {
        scores: Vec<f32>,
    }

    #[test]
    fn json_is_found_in_fences_and_prose_and_refused_otherwise() {
        let want = Scores {
            scores: vec![0.5, 1.0],
        };
        assert_eq!(
            parse_json::<Scores>("{\"scores\": [0.5, 1]}").unwrap(),
            want
        );
        assert_eq!(
            parse_json::<Scores>("```json\n{\"scores\": [0.5, 1]}\n```").unwrap(),
            want
        );
        assert_eq!(
            parse_json::<Scores>("Here you go: {\"scores\": [0.5, 1]} hope it helps").unwrap(),
            want
        );
        for bad in ["", "no", "{\"scores\": \"high\"}", "}{", "{\"scores\": [1,"] {
            let e = parse_json::<Scores>(bad).unwrap_err();
            assert!(e.contains("not the JSON asked for"), "{bad}: {e}");
        }
    }
}
