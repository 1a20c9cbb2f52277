//! A run's report (the `keel run --json` object) from the store, for a run that ended or waits
//! for a human while no one was waiting on it here.

use keel_core::{AgentState, PendingApproval, RunReport, Store, StoreError, ToolCallReport};

/// The tool call `run_id` waits to have approved, as its latest checkpoint keeps it.
pub async fn pending_approval(
    store: &dyn Store,
    run_id: &str,
) -> Result<Option<PendingApproval>, StoreError> {
    keel_core::approval::stored_pending(store, run_id).await
}

/// The choices of the question `run_id` asked last (`clarify`); empty when it offered none.
pub async fn asked_choices(store: &dyn Store, run_id: &str) -> Result<Vec<String>, StoreError> {
    Ok(keel_core::human::last_question(store, run_id)
        .await?
        .map(|(_, choices)| choices)
        .unwrap_or_default())
}

/// The report of `run_id`, when it ended or waits for a human; `Ok(None)` while it is queued or
/// running, or when there is no such run.
pub async fn stored_report(
    store: &dyn Store,
    run_id: &str,
) -> Result<Option<RunReport>, StoreError> {
    let Some(run) = store.run(run_id).await? else {
        return Ok(None);
    };
    if !(run.state.is_terminal() || run.state == AgentState::WaitingOnHuman) {
        return Ok(None);
    }
    let tool_calls = store
        .tool_calls(run_id)
        .await?
        .into_iter()
        .filter(|call| call.completed_at.is_some())
        .map(|call| ToolCallReport {
            arguments: ToolCallReport::arguments_of(&call.arguments),
            id: call.call_id,
            name: call.name,
            ok: call.ok.unwrap_or(false),
            output: call.output.unwrap_or_default(),
        })
        .collect();
    let question = if run.state == AgentState::WaitingOnHuman {
        keel_core::human::last_question(store, run_id).await?
    } else {
        None
    };
    let approval = if run.state == AgentState::WaitingOnHuman {
        pending_approval(store, run_id).await?
    } else {
        None
    };
    let (question, choices) = question
        .filter(|_| approval.is_none())
        .map_or((None, Vec::new()), |(question, choices)| {
            (Some(question), choices)
        });
    let files = store.run_files(run_id).await?;
    Ok(Some(RunReport {
        model: run.model_used.clone().unwrap_or(run.model.clone()),
        run_id: run.id,
        session_id: run.session_id,
        state: run.state,
        reason: run.reason,
        final_text: run.final_text,
        error: run.error,
        iterations: run.iterations,
        tool_calls,
        usage: run.usage,
        cost: run.cost,
        question,
        choices,
        approval,
        files,
    }))
}
