//! The retrieval evaluation (issue 17): a generated data set of 444 facts (30 projects × 12
//! attributes, 60 distractors sharing the questions' words, 24 incidents whose ids differ only
//! in the order of their digits) and 100 questions, each answered by one known fact. Recall@5
//! is measured for full text alone (SQLite FTS5, BM25; PostgreSQL's GIN index ranked with the
//! same BM25), vectors alone (the mock's deterministic trigram embeddings) and their fusion with
//! recency × importance, as `Memory` retrieves; fusion must do at least as well as each alone,
//! and PostgreSQL as well as SQLite. Of the questions, 20 ask about an incident by its id, 40
//! use the facts' own words and 40 other forms of them ("deployed" for "deploy"), which full
//! text without stemming misses.
//!
//! The numbers go to BENCHMARKS.md; run with `--nocapture` to see them.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use keel_memory::retrieval::{Candidate, RetrievalSettings, retrieve};
use keel_memory::{Memory, NewFact, fact_candidate_id};
use keel_platform::{DaemonStore, MemoryIndex};
use keel_store::SqliteStore;

/// The mock's deterministic embeddings, computed in process.
fn mock_embedder() -> keel_memory::embedding::InProcess {
    keel_memory::embedding::InProcess::new("mock-embed", keel_mock::embeddings::embed)
}

/// The mock's embeddings, without HTTP.
const PROJECTS: [&str; 30] = [
    "orion", "falcon", "juniper", "basalt", "cobalt", "meadow", "harbor", "quartz", "saffron",
    "tundra", "willow", "zephyr", "ember", "granite", "lotus", "marble", "nimbus", "obsidian",
    "pepper", "raven", "sierra", "thistle", "umber", "violet", "walnut", "yarrow", "acorn",
    "bramble", "cedar", "dune",
];

/// An attribute: the fact's words, a question in the same words, one in other forms of them.
struct Attribute {
    fact: &'static str,
    same_words: &'static str,
    other_forms: &'static str,
    values: &'static [&'static str],
}

const ATTRIBUTES: [Attribute; 12] = [
    Attribute {
        fact: "deploy region is",
        same_words: "What is the deploy region of {p}?",
        other_forms: "Where is {p} deployed?",
        values: &[
            "eu-west-3",
            "us-east-1",
            "ap-south-1",
            "eu-central-1",
            "sa-east-1",
        ],
    },
    Attribute {
        fact: "database engine is",
        same_words: "Which database engine does {p} use?",
        other_forms: "What databases back {p}?",
        values: &[
            "postgres 15",
            "mysql 8",
            "sqlite",
            "cockroachdb",
            "mariadb 11",
        ],
    },
    Attribute {
        fact: "owning team is",
        same_words: "Which team is the owning team of {p}?",
        other_forms: "Who owns {p}?",
        values: &["platform", "payments", "growth", "infra", "search"],
    },
    Attribute {
        fact: "release day is",
        same_words: "What is the release day of {p}?",
        other_forms: "When does {p} get released?",
        values: &["monday", "tuesday", "wednesday", "thursday", "friday"],
    },
    Attribute {
        fact: "log retention is",
        same_words: "What is the log retention of {p}?",
        other_forms: "How long are {p} logs retained?",
        values: &["7 days", "14 days", "30 days", "90 days", "1 year"],
    },
    Attribute {
        fact: "cache size is",
        same_words: "What is the cache size of {p}?",
        other_forms: "How big is the {p} caching layer?",
        values: &["256 MB", "512 MB", "1 GB", "2 GB", "4 GB"],
    },
    Attribute {
        fact: "alerting channel is",
        same_words: "What is the alerting channel of {p}?",
        other_forms: "Where do {p} alerts go?",
        values: &["#ops-a", "#ops-b", "#pager", "#alarms", "#noc"],
    },
    Attribute {
        fact: "primary language is",
        same_words: "What is the primary language of {p}?",
        other_forms: "Which languages is {p} written in?",
        values: &["rust", "go", "python", "kotlin", "typescript"],
    },
    Attribute {
        fact: "build tool is",
        same_words: "What build tool does {p} use?",
        other_forms: "How is {p} built?",
        values: &["bazel", "cargo", "gradle", "make", "nix"],
    },
    Attribute {
        fact: "monitoring dashboard is",
        same_words: "Where is the monitoring dashboard of {p}?",
        other_forms: "Where can I monitor {p}?",
        values: &[
            "grafana/a",
            "grafana/b",
            "datadog/c",
            "kibana/d",
            "grafana/e",
        ],
    },
    Attribute {
        fact: "backup schedule is",
        same_words: "What is the backup schedule of {p}?",
        other_forms: "How often is {p} backed up?",
        values: &[
            "nightly",
            "hourly",
            "weekly",
            "every 6 hours",
            "twice a day",
        ],
    },
    Attribute {
        fact: "api port is",
        same_words: "What is the api port of {p}?",
        other_forms: "Which ports does the {p} API listen on?",
        values: &["8080", "8443", "9000", "3000", "5000"],
    },
];

/// Distractors: a project's name and a question's words, about something else.
const DISTRACTORS: [&str; 6] = [
    "{p} was deployed to staging by mistake during the region migration",
    "the {p} database migration is planned for next quarter",
    "{p} logs mention the cache size warnings every release",
    "what the {p} team said about the backup tool was discussed at length",
    "ports for {p} were debated when the api was designed",
    "the {p} build was slow when the monitoring agent was installed",
];

/// Incidents, named by ids that are permutations of the same digits: full text tells them
/// apart by the exact token, embeddings of character trigrams hardly do (as real embeddings
/// blur identifiers and numbers).
const INCIDENT_DIGITS: [char; 4] = ['1', '2', '4', '8'];

const CAUSES: [&str; 6] = [
    "an expired certificate",
    "a full disk",
    "a bad config push",
    "a dns outage",
    "a memory leak",
    "a runaway cron job",
];

const USER: &str = "eval-user";

/// The 24 incident ids: every order of [`INCIDENT_DIGITS`].
fn incident_ids() -> Vec<String> {
    let mut ids = Vec::new();
    for a in INCIDENT_DIGITS {
        for b in INCIDENT_DIGITS.iter().filter(|d| **d != a) {
            for c in INCIDENT_DIGITS.iter().filter(|d| **d != a && *d != b) {
                for d in INCIDENT_DIGITS
                    .iter()
                    .filter(|d| **d != a && *d != b && *d != c)
                {
                    ids.push(format!("INC-{a}{b}{c}{d}"));
                }
            }
        }
    }
    ids
}

struct DataSet {
    /// (question, id of the fact that answers it).
    questions: Vec<(String, String)>,
    facts: usize,
}

async fn build(memory: &Memory) -> DataSet {
    let mut answers = std::collections::HashMap::new();
    let mut facts = 0;
    for (p, project) in PROJECTS.iter().enumerate() {
        for (a, attribute) in ATTRIBUTES.iter().enumerate() {
            let value = attribute.values[(p * 7 + a) % attribute.values.len()];
            let text = format!("The {project} service's {} {value}", attribute.fact);
            let remembered = memory
                .remember(
                    USER,
                    NewFact {
                        text,
                        key: Some(format!("{project} {}", attribute.fact)),
                        ..NewFact::default()
                    },
                )
                .await
                .unwrap();
            answers.insert((p, a), remembered.fact.id);
            facts += 1;
        }
    }
    for i in 0..60 {
        let project = PROJECTS[(i * 11) % PROJECTS.len()];
        let text = DISTRACTORS[i % DISTRACTORS.len()].replace("{p}", project);
        let new = NewFact {
            text: format!("{text} ({i})"),
            ..NewFact::default()
        };
        memory.remember(USER, new).await.unwrap();
        facts += 1;
    }
    let mut incidents = Vec::new();
    for (i, id) in incident_ids().into_iter().enumerate() {
        let project = PROJECTS[(i * 7) % PROJECTS.len()];
        let text = format!(
            "Incident {id} on {project} was caused by {}",
            CAUSES[i % CAUSES.len()]
        );
        let remembered = memory
            .remember(
                USER,
                NewFact {
                    text,
                    ..NewFact::default()
                },
            )
            .await
            .unwrap();
        incidents.push((id, remembered.fact.id));
        facts += 1;
    }
    let mut questions: Vec<(String, String)> = incidents
        .into_iter()
        .take(20)
        .map(|(id, answer)| (format!("What caused incident {id}?"), answer))
        .collect();
    questions.extend((0..80).map(|i| {
        let (p, a) = (
            (i * 13) % PROJECTS.len(),
            (i * 5 + i / 12) % ATTRIBUTES.len(),
        );
        let attribute = &ATTRIBUTES[a];
        let template = if i % 2 == 0 {
            attribute.same_words
        } else {
            attribute.other_forms
        };
        (
            template.replace("{p}", PROJECTS[p]),
            answers[&(p, a)].clone(),
        )
    }));
    DataSet { questions, facts }
}

/// Recall@5 of each way, in questions out of 100.
#[derive(Debug)]
struct Scores {
    full_text: usize,
    vectors: usize,
    fusion: usize,
}

/// Recall@5 on `store` at `now` (recency counts whole seconds, so two stores compared are
/// measured at one instant).
async fn evaluate(store: &dyn DaemonStore, data: &DataSet, now: DateTime<Utc>) -> Scores {
    let candidates: Vec<Candidate> = store
        .facts(USER, false)
        .await
        .unwrap()
        .into_iter()
        .map(|fact| Candidate::fact(fact, 2.0))
        .collect();
    let fused = RetrievalSettings {
        pinned_importance: 2.0,
        token_budget: usize::MAX,
        ..RetrievalSettings::default()
    };
    let alone = RetrievalSettings {
        recency_weight: 0.0,
        ..fused.clone()
    };
    let mut scores = Scores {
        full_text: 0,
        vectors: 0,
        fusion: 0,
    };
    for (question, answer) in &data.questions {
        let answer = fact_candidate_id(answer);
        let hits: Vec<(String, f64)> = store
            .search_facts(USER, question, fused.candidates)
            .await
            .unwrap()
            .into_iter()
            .map(|hit| (fact_candidate_id(&hit.fact_id), hit.score))
            .collect();
        let query = keel_memory::embedding::normalized(keel_mock::embeddings::embed(question));
        let found = |pieces: Vec<keel_memory::Piece>| pieces.iter().any(|p| p.id == answer);
        let full_text = [hits];
        scores.full_text +=
            usize::from(found(retrieve(&candidates, &full_text, None, now, &alone)));
        scores.vectors += usize::from(found(retrieve(&candidates, &[], Some(&query), now, &alone)));
        scores.fusion += usize::from(found(retrieve(
            &candidates,
            &full_text,
            Some(&query),
            now,
            &fused,
        )));
    }
    scores
}

/// Prints `name`'s numbers and checks what must hold of them on any store.
fn report(name: &str, data: &DataSet, scores: &Scores) {
    println!(
        "{name}: recall@5 over {} facts, {} questions: full text {}%, vectors {}%, fusion {}%",
        data.facts,
        data.questions.len(),
        scores.full_text,
        scores.vectors,
        scores.fusion
    );
    assert!(scores.fusion >= scores.full_text, "{name}: {scores:?}");
    assert!(scores.fusion >= scores.vectors, "{name}: {scores:?}");
    // Neither alone is perfect on this set, so the comparison means something.
    assert!(
        scores.full_text < 100 && scores.vectors < 100,
        "{name}: {scores:?}"
    );
}

/// The data set, remembered on a SQLite store.
async fn on_sqlite() -> (Arc<dyn DaemonStore>, DataSet) {
    let store: Arc<dyn DaemonStore> = Arc::new(SqliteStore::open_temporary().await.unwrap());
    let memory = Memory::new(store.clone()).with_embedder(Arc::new(mock_embedder()));
    let data = build(&memory).await;
    assert!(data.facts >= 300 && data.questions.len() == 100);
    (store, data)
}

#[tokio::test]
async fn fusion_recalls_at_least_as_well_as_full_text_or_vectors_alone() {
    let (store, data) = on_sqlite().await;
    let scores = evaluate(store.as_ref(), &data, Utc::now()).await;
    report("SQLite", &data, &scores);
}

/// The same facts (ids, times, embeddings) on PostgreSQL, whose full text (tsvector, GIN, BM25
/// computed as FTS5 does) must recall as well as SQLite's FTS5. Skipped, saying so, under
/// `KEEL_TEST_PG=skip`.
#[tokio::test]
async fn postgres_recalls_as_well_as_sqlite() {
    let Some(postgres) = keel_store::postgres::testing::store().await else {
        return;
    };
    let (sqlite, data) = on_sqlite().await;
    for fact in sqlite.facts(USER, true).await.unwrap() {
        postgres.save_fact(&fact).await.unwrap();
    }
    let now = Utc::now();
    let on_sqlite = evaluate(sqlite.as_ref(), &data, now).await;
    let on_postgres = evaluate(&postgres, &data, now).await;
    report("SQLite", &data, &on_sqlite);
    report("PostgreSQL", &data, &on_postgres);
    assert!(
        on_postgres.full_text >= on_sqlite.full_text && on_postgres.fusion >= on_sqlite.fusion,
        "PostgreSQL {on_postgres:?}, SQLite {on_sqlite:?}"
    );
}
