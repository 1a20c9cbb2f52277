//! One `session/prompt`: one durable keel run (or, when the session's last run waits for an
//! answer, that run going on with the prompt as the answer), its events streamed as updates
//! while it runs, and its end as the prompt's stop reason.

use std::sync::Arc;

use agent_client_protocol::Error;
use agent_client_protocol::v1::schema::{PromptResponse, SessionUpdate, StopReason};
use keel_core::{AgentError, AgentState, ApprovalDecision, ContinueOptions, RunReport, RunRequest};
use tokio_util::sync::CancellationToken;

use crate::factory::{AgentFactory, LaneGrant};
use crate::session::{AcpSession, Waiting};
use crate::updates::chunk;

/// A prompt that holds its session's prompt slot (taken by [`AcpSession::start_turn`] in
/// the order prompts arrive); the slot is free again when it is dropped.
pub struct Turn {
    session: Arc<AcpSession>,
    cancel: CancellationToken,
}

impl Drop for Turn {
    fn drop(&mut self) {
        *self.session.turn.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

impl AcpSession {
    /// Takes the session's prompt slot for a new prompt; a second prompt while one runs is
    /// refused (JSON-RPC invalid request). A cancel from now on cancels this prompt.
    pub fn start_turn(self: &Arc<Self>) -> Result<Turn, Error> {
        let cancel = CancellationToken::new();
        let mut turn = self.turn.lock().unwrap_or_else(|e| e.into_inner());
        if turn.is_some() {
            return Err(Error::invalid_request()
                .data("a prompt is already running in this session: wait for it or cancel it"));
        }
        *turn = Some(cancel.clone());
        Ok(Turn {
            session: self.clone(),
            cancel,
        })
    }

    /// Runs `text` as this session's next turn (holding `turn`) and answers the prompt when
    /// the run stops.
    pub async fn prompt(
        &self,
        factory: &dyn AgentFactory,
        turn: Turn,
        text: String,
    ) -> Result<PromptResponse, Error> {
        let cancel = turn.cancel.clone();
        let todo = match self.agent.store().journal(&self.id).await {
            Ok(Some(journal)) => keel_extensions::todo::TodoList::of(&journal),
            _ => Default::default(),
        };
        self.updates.begin_turn(todo);
        self.human.begin_turn(cancel.clone());
        let waiting = self
            .waiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let report = match waiting {
            None => self.new_run(factory, text, &cancel).await,
            Some(waiting) => self.go_on(factory, waiting, text, &cancel).await,
        }?;
        let stop = self.finish(&report, &cancel);
        drop(turn);
        Ok(PromptResponse::new(stop))
    }

    /// A new run of the session for `text`.
    async fn new_run(
        &self,
        factory: &dyn AgentFactory,
        text: String,
        cancel: &CancellationToken,
    ) -> Result<RunReport, Error> {
        let run_id = uuid::Uuid::now_v7().to_string();
        self.claim(factory, &run_id, cancel).await?;
        let mut request = RunRequest::new(text)
            .session(self.id.clone())
            .cancel_token(cancel.clone());
        request.user_id = self.user.clone();
        request.run_id = Some(run_id.clone());
        let report = self
            .agent
            .survive_panic(&run_id, self.agent.run(request))
            .await;
        self.release(factory, &run_id, report).await
    }

    /// The waiting run going on with `text` as its answer (a question) or decision (an
    /// approval: `once`, `session`, `deny`, else the editor is asked again).
    async fn go_on(
        &self,
        factory: &dyn AgentFactory,
        waiting: Waiting,
        text: String,
        cancel: &CancellationToken,
    ) -> Result<RunReport, Error> {
        let run_id = match &waiting {
            Waiting::Question { run_id } | Waiting::Approval { run_id, .. } => run_id.clone(),
        };
        if let Err(error) = self.claim(factory, &run_id, cancel).await {
            self.set_waiting(Some(waiting));
            return Err(error);
        }
        // session/cancel reaches the run however it goes on.
        let continued = ContinueOptions {
            cancel: Some(cancel.clone()),
            ..ContinueOptions::default()
        };
        let work = async {
            match &waiting {
                Waiting::Question { run_id } => {
                    self.agent
                        .answer_with_options(run_id, &text, continued.clone())
                        .await
                }
                Waiting::Approval { run_id, call } => {
                    let decision = match ApprovalDecision::parse(&text) {
                        Some(decision) => decision,
                        None => keel_core::HumanChannel::approve(self.human.as_ref(), call)
                            .await
                            .unwrap_or(ApprovalDecision::Deny),
                    };
                    self.agent
                        .approve_with_options(run_id, &call.call_id, decision, continued.clone())
                        .await
                }
            }
        };
        let report = self.agent.survive_panic(&run_id, work).await;
        if let Err(AgentError::InvalidAnswer(_)) = &report {
            // Not an answer it takes (e.g. an empty one): it still waits.
            self.set_waiting(Some(waiting));
        }
        self.release(factory, &run_id, report).await
    }

    /// Claims the session's lane for `run_id` (a refusal is the prompt's invalid request).
    pub(crate) async fn claim(
        &self,
        factory: &dyn AgentFactory,
        run_id: &str,
        cancel: &CancellationToken,
    ) -> Result<(), Error> {
        match factory.claim_lane(&self.id, run_id, cancel).await {
            Ok(LaneGrant::Claimed) => Ok(()),
            Ok(LaneGrant::Refused(why)) => Err(Error::invalid_request().data(why)),
            Err(why) => Err(Error::internal_error().data(why)),
        }
    }

    /// Releases the lane after `run_id` (unless it waits for a person) and turns the run's
    /// outcome into the prompt's.
    pub(crate) async fn release(
        &self,
        factory: &dyn AgentFactory,
        run_id: &str,
        report: Result<RunReport, AgentError>,
    ) -> Result<RunReport, Error> {
        let released = factory
            .release_lane(&self.id, run_id, report.as_ref().ok())
            .await;
        let report = report.map_err(|e| match e {
            AgentError::InvalidAnswer(message) | AgentError::NotResumable(message) => {
                Error::invalid_params().data(message)
            }
            other => Error::internal_error().data(other.to_string()),
        })?;
        released.map_err(|why| Error::internal_error().data(why))?;
        Ok(report)
    }

    /// Says what the editor has not seen yet (the answer, when it did not stream; what the
    /// run waits for; why it stopped) and gives the stop reason.
    pub(crate) fn finish(&self, report: &RunReport, cancel: &CancellationToken) -> StopReason {
        let say = |text: String| {
            self.updates
                .send(SessionUpdate::AgentMessageChunk(chunk(&text)));
        };
        if !self.updates.streamed_text()
            && report.state != AgentState::WaitingOnHuman
            && let Some(text) = report.final_text.as_deref().filter(|t| !t.is_empty())
        {
            say(text.to_string());
        }
        if cancel.is_cancelled() {
            return StopReason::Cancelled;
        }
        match report.state {
            AgentState::Completed => StopReason::EndTurn,
            AgentState::Cancelled => StopReason::Cancelled,
            AgentState::BudgetExceeded => StopReason::MaxTokens,
            AgentState::MaxSteps | AgentState::TimedOut => StopReason::MaxTurnRequests,
            AgentState::WaitingOnHuman => {
                say(self.pending(report));
                StopReason::EndTurn
            }
            state => {
                let reason = report.reason.map(|r| format!(" ({r})")).unwrap_or_default();
                say(format!(
                    "\n\nkeel: the run ended as {state}{reason}: {}",
                    report.error.as_deref().unwrap_or("no detail")
                ));
                StopReason::EndTurn
            }
        }
    }

    /// What a waiting run waits for and how to answer, remembered for the next prompt.
    fn pending(&self, report: &RunReport) -> String {
        let run_id = report.run_id.clone();
        match (&report.approval, &report.question) {
            (Some(call), _) => {
                let text = format!(
                    "\n\nkeel waits for your approval of `{}` {} ({}): reply `once`, `session` \
                     or `deny`.",
                    call.tool, call.arguments, call.reason
                );
                self.set_waiting(Some(Waiting::Approval {
                    run_id,
                    call: call.clone(),
                }));
                text
            }
            (None, Some(question)) => {
                let text = format!(
                    "\n\n{}\n\n(keel waits for your answer: reply with it.)",
                    keel_core::human::with_numbered_choices(question, &report.choices)
                );
                self.set_waiting(Some(Waiting::Question { run_id }));
                text
            }
            (None, None) => format!(
                "\n\nkeel: the run is halted: {} (see `keel runs show {}`)",
                report.error.as_deref().unwrap_or("it needs a decision"),
                report.run_id
            ),
        }
    }
}
