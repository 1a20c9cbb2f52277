//! The functions and aliases a line defines. A body is walked where it is defined, like any
//! code; the names it calls are kept, so that a function calling itself, directly or through
//! others (`:(){ :|:& };:`, `a(){ b|b& }; b(){ a|a& }; a`), is refused as a fork bomb.

use std::collections::HashSet;

use brush_parser::ast;

use super::super::Verdict;
use super::{Arg, Reader, shorten};

impl Reader<'_> {
    /// A function definition.
    pub(super) fn function(&mut self, function: &ast::FunctionDefinition) {
        let name = self.word(&function.fname).text;
        let start = self.reading.invocations.len();
        self.compound(&function.body.0);
        self.redirect_list(function.body.1.as_ref());
        let calls = self.called_since(start);
        self.define(name, calls);
    }

    /// `alias NAME=VALUE…`: each value is walked as a script where the alias is defined. An
    /// alias naming itself (`alias ls='ls -F'`) runs the command, not itself.
    pub(super) fn aliases(&mut self, words: &[Arg]) {
        for word in words.iter().skip(1) {
            let Some((name, value)) = word.text.split_once('=') else {
                continue;
            };
            if name.is_empty() || name.starts_with('-') {
                continue;
            }
            let mut calls = Vec::new();
            if word.dynamic {
                self.finding(Verdict::approval(format!(
                    "`alias {}` defines `{name}` as a command only known when it runs",
                    shorten(&word.text)
                )));
            } else {
                let start = self.reading.invocations.len();
                self.script(value);
                calls = self.called_since(start);
                calls.retain(|called| called != name);
            }
            self.define(name.to_string(), calls);
        }
    }

    /// The names called by the invocations walked since `start`: as written and without a
    /// directory.
    fn called_since(&self, start: usize) -> Vec<String> {
        let mut names = Vec::new();
        for invocation in &self.reading.invocations[start..] {
            if let Some(first) = invocation.words.first() {
                for name in [first.text.as_str(), invocation.name()] {
                    if !names.iter().any(|n| n == name) {
                        names.push(name.to_string());
                    }
                }
            }
        }
        names
    }

    /// Records the function or alias `name` calling `calls`; refuses a cycle through it.
    fn define(&mut self, name: String, calls: Vec<String>) {
        self.reading.defined.insert(name.clone());
        self.calls.insert(name.clone(), calls);
        let Some(cycle) = self.cycle_from(&name) else {
            return;
        };
        let reason = if cycle.len() == 1 {
            format!("`{name}` is a function that calls itself, the shape of a fork bomb")
        } else {
            let path: Vec<String> = cycle
                .iter()
                .chain([&name])
                .map(|n| format!("`{n}`"))
                .collect();
            format!(
                "functions that call each other ({}), the shape of a fork bomb",
                path.join(" -> ")
            )
        };
        self.finding(Verdict::refuse(reason));
    }

    /// A path of calls from `name` back to itself through the functions and aliases defined so
    /// far (`[name]` when it calls itself), if there is one.
    fn cycle_from(&self, name: &str) -> Option<Vec<String>> {
        let mut seen = HashSet::new();
        let mut paths = vec![vec![name.to_string()]];
        while let Some(path) = paths.pop() {
            let last = path.last().map(String::as_str).unwrap_or(name);
            for called in self.calls.get(last).into_iter().flatten() {
                if called == name {
                    return Some(path);
                }
                if seen.insert(called.clone()) {
                    let mut next = path.clone();
                    next.push(called.clone());
                    paths.push(next);
                }
            }
        }
        None
    }
}
