//! `skills_list` and `skill_view`: the model sees every skill's name and description, and opens
//! the one it needs, beyond those the message brought into the system prompt.

use std::sync::Arc;

use async_trait::async_trait;
use keel_core::{Permission, Reach, Tool, ToolContext, ToolError, ToolOutput, ToolSpec};
use schemars::JsonSchema;
use serde::Deserialize;

use super::SkillSet;
use crate::schema::{parameters_for, parse_args};

/// The tool module of the skill tools, for personas' `allowed_modules`.
pub const SKILLS_MODULE: &str = "skills";
/// Lists the skills.
pub const SKILLS_LIST: &str = "skills_list";
/// Opens one skill.
pub const SKILL_VIEW: &str = "skill_view";

/// `skills_list` takes no arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListArgs {}

/// The arguments of `skill_view`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ViewArgs {
    /// The skill's name, as `skills_list` gives it.
    name: String,
}

/// The two skill tools over `skills`.
pub fn skill_tools(skills: Arc<SkillSet>) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(SkillsList {
            skills: skills.clone(),
            spec: spec(
                SKILLS_LIST,
                "List the skills you can open: each one's name, what it is for, and the words \
                 that bring it in.",
                parameters_for::<ListArgs>(),
            ),
        }),
        Arc::new(SkillView {
            skills,
            spec: spec(
                SKILL_VIEW,
                "Open a skill by name: its full instructions.",
                parameters_for::<ViewArgs>(),
            ),
        }),
    ]
}

fn spec(name: &str, description: &str, parameters: serde_json::Value) -> ToolSpec {
    // The agent's own instructions, which matching puts in any session's prompt anyway.
    let mut spec = ToolSpec::new(name, description, parameters)
        .idempotent()
        .reach(Reach::Conversation);
    spec.module = Some(SKILLS_MODULE.to_string());
    spec.required_permission = Permission::Guest;
    spec
}

struct SkillsList {
    skills: Arc<SkillSet>,
    spec: ToolSpec,
}

#[async_trait]
impl Tool for SkillsList {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(
        &self,
        args: serde_json::Value,
        _ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let _: ListArgs = parse_args(SKILLS_LIST, args)?;
        if self.skills.all().is_empty() {
            return Ok(ToolOutput::text("No skills are installed."));
        }
        let lines: Vec<String> = self
            .skills
            .all()
            .iter()
            .map(|skill| {
                let triggers = if skill.triggers.is_empty() {
                    String::new()
                } else {
                    format!(" (triggers: {})", skill.triggers.join(", "))
                };
                format!("- {}: {}{triggers}", skill.name, skill.description)
            })
            .collect();
        Ok(ToolOutput::text(lines.join("\n")))
    }
}

struct SkillView {
    skills: Arc<SkillSet>,
    spec: ToolSpec,
}

#[async_trait]
impl Tool for SkillView {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    async fn call(
        &self,
        args: serde_json::Value,
        _ctx: &ToolContext,
    ) -> Result<ToolOutput, ToolError> {
        let args: ViewArgs = parse_args(SKILL_VIEW, args)?;
        let skill = self.skills.get(args.name.trim()).ok_or_else(|| {
            let known: Vec<&str> = self.skills.all().iter().map(|s| s.name.as_str()).collect();
            ToolError::invalid_arguments(format!(
                "no skill `{}`; the skills are: {}",
                args.name.chars().take(80).collect::<String>(),
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ))
        })?;
        Ok(ToolOutput::text(format!(
            "# {}\n{}\n\n{}",
            skill.name, skill.description, skill.body
        )))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::Skill;
    use super::*;

    fn tools() -> Vec<Arc<dyn Tool>> {
        skill_tools(Arc::new(SkillSet::from_skills(vec![Skill {
            name: "deploy".into(),
            description: "Ship it".into(),
            triggers: vec!["deploy".into()],
            body: "Run ./ship.".into(),
            dir: "/x".into(),
        }])))
    }

    fn ctx() -> ToolContext {
        ToolContext {
            session_id: "s".into(),
            run_id: "r".into(),
            call_id: "c".into(),
            user_id: None,
            untrusted_source: false,
            place: None,
            cancel: Default::default(),
        }
    }

    #[tokio::test]
    async fn lists_and_opens_skills_and_refuses_unknown_names() {
        let tools = tools();
        let list = tools[0].call(json!({}), &ctx()).await.unwrap();
        assert_eq!(list.content, "- deploy: Ship it (triggers: deploy)");
        let view = tools[1]
            .call(json!({"name": "deploy"}), &ctx())
            .await
            .unwrap();
        assert!(view.content.contains("Run ./ship."));
        let unknown = tools[1]
            .call(json!({"name": "../../etc/passwd"}), &ctx())
            .await
            .unwrap_err();
        assert!(
            unknown.message.contains("the skills are: deploy"),
            "{unknown:?}"
        );
        assert!(tools[1].call(json!({}), &ctx()).await.is_err());
        assert!(tools[0].call(json!({"x": 1}), &ctx()).await.is_err());
    }
}
