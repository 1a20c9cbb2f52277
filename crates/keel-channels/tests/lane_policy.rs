//! A channel's lane policy by kind of chat (`[channels.telegram] lane_policy = { dm = "reject",
//! group = "queue" }`), through the intake on the memory store: a direct chat's conversation
//! is made with `reject`, and a message that finds it working is refused with one short notice
//! to the chat (its event recorded, so a redelivery is not answered twice); a group's
//! conversation queues.

use keel_channels::access::{Access, Allow};
use keel_channels::intake::BUSY_NOTICE;
use keel_channels::{ChannelsConfig, Inbound, Intake, Received, Target};
use keel_core::{LanePolicy, Store};
use keel_mock::Step;
use keel_platform::{ChannelStore, ChatKind, DeliveryRoute, InboundKey, IncomingMessage, Source};

mod common;

fn inbound(update: u64, chat: &str, kind: ChatKind, text: &str) -> Inbound {
    let message = IncomingMessage {
        platform: "telegram".into(),
        platform_user_id: "42".into(),
        platform_username: None,
        platform_server_id: None,
        platform_channel_id: chat.into(),
        platform_thread_id: None,
        text: text.into(),
        source: Source::Chat,
        attachments: Vec::new(),
        chat_kind: kind,
    };
    let route = DeliveryRoute {
        channel: "telegram".into(),
        target: Target {
            chat: chat.into(),
            ..Target::default()
        }
        .encode(),
    };
    Inbound::new(
        InboundKey::new("telegram", update.to_string()),
        message,
        route,
    )
}

#[tokio::test(start_paused = true)]
async fn a_direct_chat_under_reject_is_told_it_is_busy_once_and_a_group_queues() {
    let (state, store, _) = common::daemon_state(Step::text("done").with_delay_ms(5_000)).await;
    let channels: toml::Table = toml::from_str(
        "[telegram]\ntoken_env = \"T\"\nlane_policy = { dm = \"reject\", group = \"queue\" }\n",
    )
    .unwrap();
    let config = ChannelsConfig::from_toml(&channels, &[]).unwrap();
    assert!(
        !config
            .telegram
            .as_ref()
            .unwrap()
            .as_table()
            .unwrap()
            .contains_key("lane_policy"),
        "the platform's own section never sees it"
    );
    let intake = Intake::new(store.clone(), state.engine.clone(), state.inbox.clone())
        .with_lane_policies(config.lane_policies.clone());
    let everyone = Access {
        allow: Allow::Everyone,
        allowlist: Vec::new(),
    };

    let first = intake
        .receive(inbound(1, "42", ChatKind::Dm, "one"), &everyone)
        .await
        .unwrap();
    let Received::Queued {
        run_id,
        conversation_id,
    } = first
    else {
        panic!("{first:?}");
    };
    let conversation = store.session(&conversation_id).await.unwrap().unwrap();
    assert_eq!(conversation.lane_policy, LanePolicy::Reject);
    let second = intake
        .receive(inbound(2, "42", ChatKind::Dm, "two"), &everyone)
        .await
        .unwrap();
    assert_eq!(second, Received::Busy);
    let again = intake
        .receive(inbound(2, "42", ChatKind::Dm, "two"), &everyone)
        .await
        .unwrap();
    assert!(matches!(again, Received::Duplicate { .. }), "{again:?}");
    let outbox = store.pending_outbox("telegram", 10).await.unwrap();
    let notices: Vec<&str> = outbox.iter().filter_map(|i| i.body.as_deref()).collect();
    assert_eq!(notices, vec![BUSY_NOTICE], "told once");
    let runs = store.list_runs(Some(&conversation_id), 10).await.unwrap();
    assert_eq!(runs.len(), 1, "the refused message stored no run");

    // A group chat of the same channel queues.
    let a = intake
        .receive(inbound(3, "-100", ChatKind::Group, "a"), &everyone)
        .await
        .unwrap();
    let b = intake
        .receive(inbound(4, "-100", ChatKind::Group, "b"), &everyone)
        .await
        .unwrap();
    let (
        Received::Queued {
            conversation_id: group,
            ..
        },
        Received::Queued { .. },
    ) = (a, b)
    else {
        panic!("the group refused a message");
    };
    let group = store.session(&group).await.unwrap().unwrap();
    assert_eq!(group.lane_policy, LanePolicy::Queue);
    state.engine.wait(&run_id).await.unwrap();
}
