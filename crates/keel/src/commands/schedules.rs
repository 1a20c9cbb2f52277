//! `keel schedules`: the operator's schedules, read and written in the store (the daemon may be
//! running: the store is shared, and its scheduler sees a change at its next tick). Making a
//! schedule and changing its state are keel-server's ([`keel_server::schedules::plan`]), the
//! same as the API's.

use std::process::ExitCode;

use chrono::{DateTime, SecondsFormat, Utc};
use keel_platform::DaemonStore;
use keel_platform::schedule::{Creator, Schedule, ScheduleFilter};
use keel_server::schedules::plan::{
    Change, ScheduleRequest, describe, plan_schedule, state_change,
};
use keel_server::schedules::{SHOWN_SLOTS, ScheduleView, SlotView};

use crate::cli::{SchedulesAction, SchedulesArgs};
use crate::config::{ConfigError, keel_home};
use crate::setup;
use crate::terminal_text::terminal_safe;

/// Schedules `keel schedules list` shows at most.
const LISTED: usize = 500;

/// Runs `keel schedules`.
pub async fn schedules(args: SchedulesArgs) -> anyhow::Result<ExitCode> {
    let home = keel_home()?;
    let store = setup::open_store(&home).await?;
    let store = store.as_ref();
    match args.action {
        SchedulesAction::List { conversation, json } => list(store, conversation, json).await?,
        SchedulesAction::Add {
            conversation,
            at,
            every,
            cron,
            tz,
            catch_up,
            text,
        } => {
            let (kind, spec) = match (at, every, cron) {
                (Some(at), _, _) => ("once", at),
                (_, Some(every), _) => ("every", every),
                (_, _, Some(cron)) => ("cron", cron),
                _ => return Err(ConfigError("say when: --at, --every or --cron".into()).into()),
            };
            let request = ScheduleRequest {
                kind: kind.into(),
                spec,
                tz,
                text: text.join(" "),
                catch_up,
                ..ScheduleRequest::default()
            };
            add(store, &conversation, &request).await?;
        }
        SchedulesAction::Show { id, json } => show(store, &id, json).await?,
        SchedulesAction::Pause { id } => {
            let paused = change(store, &id, Change::Pause { by: "an operator" }).await?;
            println!("schedule {} paused", paused.id);
        }
        SchedulesAction::Resume { id } => {
            let resumed = change(store, &id, Change::Resume).await?;
            println!(
                "schedule {} resumed; next at {}",
                resumed.id,
                instant(resumed.next_slot)
            );
        }
        SchedulesAction::Rm { id } => {
            if !store.delete_schedule(&id).await? {
                return Err(unknown(&id).into());
            }
            println!("schedule {id} deleted");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn unknown(id: &str) -> ConfigError {
    ConfigError(format!(
        "no schedule has the id `{id}` (see `keel schedules list`)"
    ))
}

fn instant(at: Option<DateTime<Utc>>) -> String {
    at.map_or("-".into(), |at| {
        at.to_rfc3339_opts(SecondsFormat::Secs, true)
    })
}

/// Text from the store, shown on one line of a terminal.
fn line(text: &str) -> String {
    terminal_safe(&text.replace(['\n', '\r'], " ")).into_owned()
}

async fn list(
    store: &dyn DaemonStore,
    conversation: Option<String>,
    json: bool,
) -> anyhow::Result<()> {
    let filter = ScheduleFilter {
        session_id: conversation,
        owner: None,
        limit: LISTED,
    };
    let schedules = store.list_schedules(&filter).await?;
    if schedules.is_empty() && !json {
        println!(
            "no schedules: add one with `keel schedules add --conversation ID --every 1h TEXT`"
        );
    }
    for schedule in schedules {
        if json {
            println!("{}", serde_json::to_string(&ScheduleView::from(schedule))?);
            continue;
        }
        let paused = schedule
            .paused_reason
            .as_deref()
            .map_or(String::new(), |reason| format!(" ({})", line(reason)));
        println!(
            "{}  {}{paused}  {}  next {}  conversation {}  {}",
            schedule.id,
            schedule.state,
            line(&describe(&schedule)),
            instant(schedule.next_slot),
            line(&schedule.session_id),
            line(&schedule.text)
        );
    }
    Ok(())
}

async fn add(
    store: &dyn DaemonStore,
    conversation: &str,
    request: &ScheduleRequest,
) -> anyhow::Result<()> {
    let Some(session) = store.session(conversation).await? else {
        return Err(ConfigError(format!(
            "no conversation has the id `{conversation}` (see `keel sessions`)"
        ))
        .into());
    };
    let schedule =
        plan_schedule(&session, request, Creator::Operator, Utc::now()).map_err(ConfigError)?;
    store.create_schedule(&schedule).await?;
    println!(
        "schedule {} added to conversation {}: {}, catch-up {}, next at {}",
        schedule.id,
        line(&schedule.session_id),
        describe(&schedule),
        schedule.catch_up,
        instant(schedule.next_slot)
    );
    Ok(())
}

async fn show(store: &dyn DaemonStore, id: &str, json: bool) -> anyhow::Result<()> {
    let schedule = store.schedule(id).await?.ok_or_else(|| unknown(id))?;
    let slots: Vec<SlotView> = store
        .slots(id, SHOWN_SLOTS)
        .await?
        .into_iter()
        .map(SlotView::from)
        .collect();
    let mut view = ScheduleView::from(schedule);
    if json {
        view.slots = Some(slots);
        println!("{}", serde_json::to_string(&view)?);
        return Ok(());
    }
    println!("schedule {}", view.id);
    println!(
        "  conversation {}  owner {}",
        line(&view.conversation_id),
        view.owner.as_deref().map_or("-".into(), line)
    );
    println!(
        "  {}  catch-up {}  made by {}",
        line(&view.when),
        view.catch_up,
        view.created_by
    );
    let paused = view
        .paused_reason
        .as_deref()
        .map_or(String::new(), |reason| format!(" ({})", line(reason)));
    println!(
        "  {}{paused}  next {}  failures {} of {}",
        view.state,
        instant(view.next_slot),
        view.failures,
        view.max_failures
    );
    println!("  text: {}", line(&view.text));
    if slots.is_empty() {
        println!("  no slots yet");
    }
    for slot in slots {
        let run = match (&slot.run_id, &slot.run_state) {
            (Some(run), Some(state)) => format!("  run {run} ({state})"),
            (Some(run), None) => format!("  run {run}"),
            _ => String::new(),
        };
        let reason = slot
            .reason
            .as_deref()
            .map_or(String::new(), |reason| format!("  {}", line(reason)));
        println!(
            "  {}  {}{run}{reason}",
            instant(Some(slot.slot)),
            slot.outcome
        );
    }
    Ok(())
}

async fn change(store: &dyn DaemonStore, id: &str, change: Change<'_>) -> anyhow::Result<Schedule> {
    let schedule = store.schedule(id).await?.ok_or_else(|| unknown(id))?;
    let now = Utc::now();
    let to = state_change(&schedule, change, now).map_err(ConfigError)?;
    store
        .set_schedule_state(id, to.state, to.reason.as_deref(), to.next_slot, now)
        .await?;
    Ok(store.schedule(id).await?.ok_or_else(|| unknown(id))?)
}
