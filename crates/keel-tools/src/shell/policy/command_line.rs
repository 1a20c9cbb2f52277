//! Reading a command line into the simple commands it would run.
//!
//! The line is parsed by brush-parser (a bash parser) and walked: every simple command in lists,
//! `&&`/`||` chains, pipelines, subshells, groups, loops, conditionals, function bodies, command
//! and process substitutions, heredocs that expand, and the scripts given to `sh -c`, `eval`,
//! `su -c` and a shell reading a heredoc, becomes an [`Invocation`] with its words unquoted. A
//! wrapper (`env`, `timeout`, `xargs`, `sudo`, …; see [`super::wrappers`]) yields its own
//! invocation and the one it runs. What cannot be known without running the line (a command
//! name from a variable, a script built at run time, a shell reading a pipe, a text that does
//! not parse) becomes a finding: a verdict no configured pattern can lift.
//!
//! The walk follows the working directory as the line moves it ([`directories`]): each
//! invocation carries the directory it would run in. And it keeps the functions and aliases the
//! line defines ([`definitions`]): their bodies are walked where they are defined, their names
//! are never taken for the commands they shadow, and functions that call each other are a fork
//! bomb.

mod definitions;
mod directories;
mod words;

use std::collections::{HashMap, HashSet};
use std::io::Cursor;

use brush_parser::ast::{self, AndOr, Command, CommandPrefixOrSuffixItem, CompoundCommand};
use brush_parser::ast::{IoFileRedirectKind, IoFileRedirectTarget, IoRedirect};
use brush_parser::{Parser, ParserOptions};

use super::Verdict;
use super::places::{Cwd, Places};
use super::wrappers::{DOWNLOADERS, Inner, inner_commands};

/// How deep scripts inside scripts (`sh -c "sh -c '…'"`, nested `$( … )`) are followed.
const MAX_DEPTH: usize = 12;

/// One word of a command, as the shell would pass it, as far as it is known before running.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Arg {
    /// The word with quotes and escapes resolved; expansions are kept as written (`$X`), except
    /// `~`, `$HOME` and `${HOME}` at the start, which become `~`.
    pub text: String,
    /// Holds an expansion whose value is only known when the command runs.
    pub dynamic: bool,
    /// Holds unquoted glob characters (`*`, `?`, `[`) or a brace expansion.
    pub glob: bool,
}

impl Arg {
    /// A literal word.
    #[cfg(test)]
    pub fn literal(text: &str) -> Self {
        Arg {
            text: text.to_string(),
            ..Arg::default()
        }
    }
}

/// One simple command the line would run.
#[derive(Clone, Debug, Default)]
pub(crate) struct Invocation {
    /// The command name and its arguments; empty for a bare redirection (`> file`).
    pub words: Vec<Arg>,
    /// The files its redirections write to (`>`, `>>`, `>|`, `<>`, `&>`).
    pub writes: Vec<Arg>,
    /// More arguments come from its input at run time (a command run by `xargs`).
    pub args_from_input: bool,
    /// The directory it would run in.
    pub cwd: Cwd,
}

impl Invocation {
    /// The command name without its directory (`/bin/rm` is `rm`), or "" for none.
    pub fn name(&self) -> &str {
        self.words
            .first()
            .map_or("", |w| w.text.rsplit('/').next().unwrap_or(&w.text))
    }

    /// The arguments after the name.
    pub fn args(&self) -> &[Arg] {
        self.words.get(1..).unwrap_or(&[])
    }

    /// The words the configured patterns see: the name without its directory, then the
    /// arguments.
    pub fn pattern_words(&self) -> Vec<&str> {
        let mut words = vec![self.name()];
        words.extend(self.args().iter().map(|a| a.text.as_str()));
        words
    }

    /// The command as shown in reasons.
    pub fn shown(&self) -> String {
        let mut words: Vec<&str> = self.words.iter().map(|w| w.text.as_str()).collect();
        let writes: Vec<String> = self
            .writes
            .iter()
            .map(|w| format!("> {}", w.text))
            .collect();
        words.extend(writes.iter().map(String::as_str));
        shorten(&words.join(" "))
    }
}

/// Everything read from one command line.
#[derive(Debug, Default)]
pub(crate) struct Reading {
    /// Each simple command, in order of appearance.
    pub invocations: Vec<Invocation>,
    /// What could not be known before running, and fork bombs.
    pub findings: Vec<Verdict>,
    /// The names the line defines as functions or aliases.
    pub defined: HashSet<String>,
}

/// Where a command's standard input comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stdin {
    /// keel's: closed.
    Closed,
    /// A pipe from an earlier command.
    Pipe,
    /// A pipe from an earlier command that downloads (`curl`, `wget`).
    Download,
}

/// Reads `command` (see the module documentation); paths are placed by `places`.
pub(crate) fn read(command: &str, places: &Places) -> Reading {
    let mut reader = Reader {
        reading: Reading::default(),
        depth: 0,
        stdin: Stdin::Closed,
        options: ParserOptions::default(),
        places,
        cwd: Cwd::default(),
        pushed: Vec::new(),
        cdpath: command.contains("CDPATH"),
        calls: HashMap::new(),
        at_exit: Vec::new(),
    };
    reader.script(command);
    // A trap's script runs when the shell exits, wherever the line left it.
    for script in std::mem::take(&mut reader.at_exit) {
        reader.script(&script);
    }
    reader.reading
}

/// The walk over one command line and the scripts inside it.
struct Reader<'a> {
    reading: Reading,
    depth: usize,
    stdin: Stdin,
    options: ParserOptions,
    places: &'a Places,
    /// Where the commands walked now would run.
    cwd: Cwd,
    /// The directories `pushd` left, for `popd`.
    pushed: Vec<Cwd>,
    /// The line mentions `CDPATH`, which may send a `cd` anywhere.
    cdpath: bool,
    /// Each function and alias defined so far, with the names its body calls.
    calls: HashMap<String, Vec<String>>,
    /// The scripts of `trap`, walked again at the end.
    at_exit: Vec<String>,
}

impl Reader<'_> {
    fn finding(&mut self, verdict: Verdict) {
        self.reading.findings.push(verdict);
    }

    /// Walks code that runs in a subshell or another process: whatever directory it moves to
    /// stays there.
    fn isolated(&mut self, walk: impl FnOnce(&mut Self)) {
        let saved = (self.cwd.clone(), self.pushed.clone());
        walk(self);
        (self.cwd, self.pushed) = saved;
    }

    /// Walks a loop's code; when a turn ends elsewhere than it began, the next turns start
    /// somewhere only known when it runs, so the code is walked again from there (once: from
    /// a place already unknown, a turn is walked once, so nested loops stay linear).
    fn looped(&mut self, walk: impl Fn(&mut Self)) {
        let before = self.cwd.clone();
        walk(self);
        if self.cwd != before && !matches!(before, Cwd::Unknown(_)) {
            self.cwd = Cwd::Unknown("a loop changes directory on each turn".into());
            walk(self);
        }
    }

    /// Parses and walks a script: the whole line, or one found inside it.
    fn script(&mut self, text: &str) {
        if self.depth >= MAX_DEPTH {
            self.finding(Verdict::approval(format!(
                "`{}` nests scripts more than {MAX_DEPTH} deep, too deep to check",
                shorten(text)
            )));
            return;
        }
        let parsed = Parser::new(Cursor::new(text.as_bytes()), &self.options).parse_program();
        match parsed {
            Ok(program) => {
                self.depth += 1;
                for list in &program.complete_commands {
                    self.list(list);
                }
                self.depth -= 1;
            }
            Err(e) => self.finding(Verdict::approval(format!(
                "`{}` could not be parsed ({e}), so it cannot be checked",
                shorten(text)
            ))),
        }
    }

    fn list(&mut self, list: &ast::CompoundList) {
        for item in &list.0 {
            self.and_or(&item.0);
        }
    }

    fn and_or(&mut self, list: &ast::AndOrList) {
        self.pipeline(&list.first);
        for next in &list.additional {
            match next {
                AndOr::And(p) | AndOr::Or(p) => self.pipeline(p),
            }
        }
    }

    fn pipeline(&mut self, pipeline: &ast::Pipeline) {
        let outer = self.stdin;
        let mut downloading = false;
        for (i, command) in pipeline.seq.iter().enumerate() {
            self.stdin = match (i, downloading) {
                (0, _) => outer,
                (_, true) => Stdin::Download,
                (_, false) => Stdin::Pipe,
            };
            let start = self.reading.invocations.len();
            self.command(command);
            downloading |= self.reading.invocations[start..]
                .iter()
                .any(|inv| DOWNLOADERS.contains(&inv.name()));
        }
        self.stdin = outer;
    }

    fn command(&mut self, command: &Command) {
        match command {
            Command::Simple(simple) => self.simple(simple),
            Command::Compound(compound, redirects) => {
                self.compound(compound);
                self.redirect_list(redirects.as_ref());
            }
            Command::Function(function) => self.function(function),
            Command::ExtendedTest(test, redirects) => {
                self.extended_test(&test.expr);
                self.redirect_list(redirects.as_ref());
            }
        }
    }

    fn compound(&mut self, compound: &CompoundCommand) {
        match compound {
            CompoundCommand::Arithmetic(a) => self.arithmetic(&a.expr.value),
            CompoundCommand::ArithmeticForClause(f) => {
                for expr in [&f.initializer, &f.condition, &f.updater]
                    .into_iter()
                    .flatten()
                {
                    self.arithmetic(&expr.value);
                }
                self.looped(|reader| reader.list(&f.body.list));
            }
            CompoundCommand::BraceGroup(g) => self.list(&g.list),
            CompoundCommand::Subshell(s) => self.isolated(|reader| reader.list(&s.list)),
            CompoundCommand::ForClause(f) => {
                for value in f.values.iter().flatten() {
                    self.word(value);
                }
                self.looped(|reader| reader.list(&f.body.list));
            }
            CompoundCommand::CaseClause(c) => {
                self.word(&c.value);
                for case in &c.cases {
                    for pattern in &case.patterns {
                        self.word(pattern);
                    }
                    if let Some(body) = &case.cmd {
                        self.list(body);
                    }
                }
            }
            CompoundCommand::IfClause(c) => {
                self.list(&c.condition);
                self.list(&c.then);
                for clause in c.elses.iter().flatten() {
                    if let Some(condition) = &clause.condition {
                        self.list(condition);
                    }
                    self.list(&clause.body);
                }
            }
            CompoundCommand::WhileClause(w) | CompoundCommand::UntilClause(w) => {
                self.looped(|reader| {
                    reader.list(&w.0);
                    reader.list(&w.1.list);
                });
            }
            CompoundCommand::Coprocess(c) => self.command(&c.body),
        }
    }

    fn extended_test(&mut self, expr: &ast::ExtendedTestExpr) {
        use ast::ExtendedTestExpr as E;
        match expr {
            E::And(a, b) | E::Or(a, b) => {
                self.extended_test(a);
                self.extended_test(b);
            }
            E::Not(a) | E::Parenthesized(a) => self.extended_test(a),
            E::UnaryTest(_, w) => {
                self.word(w);
            }
            E::BinaryTest(_, a, b) => {
                self.word(a);
                self.word(b);
            }
        }
    }

    /// The redirections of a compound command, judged as a command without a name.
    fn redirect_list(&mut self, redirects: Option<&ast::RedirectList>) {
        let Some(redirects) = redirects else { return };
        let mut invocation = Invocation {
            cwd: self.cwd.clone(),
            ..Invocation::default()
        };
        let mut documents = Vec::new();
        for redirect in &redirects.0 {
            self.redirect(redirect, &mut invocation.writes, &mut documents);
        }
        self.reading.invocations.push(invocation);
    }

    fn simple(&mut self, simple: &ast::SimpleCommand) {
        let mut words = Vec::new();
        let mut writes = Vec::new();
        let mut documents = Vec::new();
        let prefix = simple.prefix.iter().flat_map(|p| &p.0);
        let suffix = simple.suffix.iter().flat_map(|s| &s.0);
        for item in prefix {
            self.item(item, &mut words, &mut writes, &mut documents);
        }
        if let Some(word) = &simple.word_or_name {
            let arg = self.word(word);
            words.push(arg);
        }
        for item in suffix {
            self.item(item, &mut words, &mut writes, &mut documents);
        }
        self.invocation(words, writes, &documents, false);
    }

    fn item(
        &mut self,
        item: &CommandPrefixOrSuffixItem,
        words: &mut Vec<Arg>,
        writes: &mut Vec<Arg>,
        documents: &mut Vec<String>,
    ) {
        match item {
            CommandPrefixOrSuffixItem::IoRedirect(r) => self.redirect(r, writes, documents),
            CommandPrefixOrSuffixItem::Word(w) => {
                let arg = self.word(w);
                words.push(arg);
            }
            // Before the name an assignment only sets a variable; after it (`env X=1 cmd`) it
            // is an argument.
            CommandPrefixOrSuffixItem::AssignmentWord(_, w) => {
                let arg = self.word(w);
                if !words.is_empty() {
                    words.push(arg);
                }
            }
            CommandPrefixOrSuffixItem::ProcessSubstitution(_, sub) => {
                self.isolated(|reader| reader.list(&sub.list));
                words.push(Arg {
                    text: "<(…)".into(),
                    dynamic: true,
                    glob: false,
                });
            }
        }
    }

    /// Records one simple command, then what it runs in turn (a wrapper's command, a shell's
    /// script), and what it changes for the commands after it (the directory, definitions).
    fn invocation(
        &mut self,
        words: Vec<Arg>,
        writes: Vec<Arg>,
        documents: &[String],
        args_from_input: bool,
    ) {
        // `env -C DIR cmd`, `git -C DIR …`: the command and what it runs start in DIR.
        let outer = self
            .runs_in(&words)
            .map(|moved| std::mem::replace(&mut self.cwd, moved));
        let invocation = Invocation {
            words,
            writes,
            args_from_input,
            cwd: self.cwd.clone(),
        };
        // `[` is the test command, not a pattern.
        if let Some(name) = invocation.words.first()
            && (name.dynamic || (name.glob && name.text != "[") || name.text.is_empty())
        {
            self.finding(Verdict::approval(format!(
                "`{}` runs a command whose name is only known when it runs",
                invocation.shown()
            )));
        }
        let inner = inner_commands(&invocation.words);
        let shown = invocation.shown();
        let name = invocation.name().to_string();
        let words = invocation.words.clone();
        self.reading.invocations.push(invocation);
        self.change_directory(&name, &words);
        if name == "alias" {
            self.aliases(&words);
        }
        for inner in inner {
            match inner {
                Inner::Command(words, from_input) => {
                    self.invocation(words, Vec::new(), documents, args_from_input || from_input)
                }
                Inner::Script(script) if script.dynamic => self.finding(Verdict::approval(
                    format!("`{shown}` runs a script that is only known when it runs"),
                )),
                // These run their script in this very shell: where it moves, the line follows.
                Inner::Script(script) if matches!(name.as_str(), "eval" | "source" | ".") => {
                    self.script(&script.text)
                }
                Inner::Script(script) if name == "trap" => {
                    self.script(&script.text);
                    self.at_exit.push(script.text);
                }
                Inner::Script(script) => self.isolated(|reader| reader.script(&script.text)),
                Inner::ReadsStdin if !documents.is_empty() => {
                    for document in documents {
                        self.isolated(|reader| reader.script(document));
                    }
                }
                Inner::ReadsStdin => match self.stdin {
                    Stdin::Closed => {}
                    Stdin::Pipe => self.finding(Verdict::approval(format!(
                        "`{name}` runs a script read from a pipe, which cannot be checked"
                    ))),
                    Stdin::Download => self.finding(Verdict::approval(format!(
                        "a download is piped into `{name}`: it would run a script nobody has seen"
                    ))),
                },
            }
        }
        if let Some(outer) = outer {
            self.cwd = outer;
        }
    }

    fn redirect(
        &mut self,
        redirect: &IoRedirect,
        writes: &mut Vec<Arg>,
        documents: &mut Vec<String>,
    ) {
        match redirect {
            IoRedirect::File(_, kind, target) => match target {
                IoFileRedirectTarget::Filename(w) => {
                    let arg = self.word(w);
                    if matches!(
                        kind,
                        IoFileRedirectKind::Write
                            | IoFileRedirectKind::Append
                            | IoFileRedirectKind::Clobber
                            | IoFileRedirectKind::ReadAndWrite
                            | IoFileRedirectKind::DuplicateOutput
                    ) {
                        writes.push(arg);
                    }
                }
                IoFileRedirectTarget::Fd(_) => {}
                IoFileRedirectTarget::ProcessSubstitution(_, sub) => {
                    self.isolated(|reader| reader.list(&sub.list))
                }
                IoFileRedirectTarget::Duplicate(w) => {
                    let arg = self.word(w);
                    // `>&2` and `>&-` name descriptors; anything else (`>& file`) is a file.
                    let descriptor = arg.text.chars().all(|c| c.is_ascii_digit() || c == '-');
                    if !descriptor && matches!(kind, IoFileRedirectKind::DuplicateOutput) {
                        writes.push(arg);
                    }
                }
            },
            IoRedirect::HereDocument(_, document) => {
                if document.requires_expansion {
                    match brush_parser::word::parse_heredoc(&document.doc.value, &self.options) {
                        Ok(pieces) => {
                            let mut arg = Arg::default();
                            self.pieces(&document.doc.value, &pieces, &mut arg, true);
                        }
                        Err(_) => self.finding(Verdict::approval(
                            "a heredoc could not be parsed, so it cannot be checked",
                        )),
                    }
                }
                documents.push(document.doc.value.clone());
            }
            IoRedirect::HereString(_, w) => {
                let arg = self.word(w);
                documents.push(arg.text);
            }
            IoRedirect::OutputAndError(w, _) => {
                let arg = self.word(w);
                writes.push(arg);
            }
        }
    }
}
/// A command cut to a length fit for a reason.
pub(crate) fn shorten(text: &str) -> String {
    const LIMIT: usize = 120;
    let text = text.trim();
    if text.chars().count() <= LIMIT {
        text.to_string()
    } else {
        let head: String = text.chars().take(LIMIT).collect();
        format!("{head}…")
    }
}
