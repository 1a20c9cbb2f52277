//! Words: unquoting them as the shell would, and walking the commands inside them (`$( … )`,
//! `` ` … ` ``) as scripts of their own.

use brush_parser::ast;
use brush_parser::word::{Parameter, ParameterExpr, TildeExpr, WordPiece, WordPieceWithSource};

use super::super::Verdict;
use super::{Arg, Reader, shorten};

impl Reader<'_> {
    /// Unquotes a word; command substitutions inside are walked as scripts.
    pub(super) fn word(&mut self, word: &ast::Word) -> Arg {
        match brush_parser::word::parse(&word.value, &self.options) {
            Ok(pieces) => {
                let mut arg = Arg::default();
                self.pieces(&word.value, &pieces, &mut arg, false);
                arg
            }
            Err(e) => {
                self.finding(Verdict::approval(format!(
                    "the word `{}` could not be parsed ({e}), so it cannot be checked",
                    shorten(&word.value)
                )));
                Arg {
                    text: word.value.clone(),
                    dynamic: true,
                    glob: false,
                }
            }
        }
    }

    pub(super) fn pieces(
        &mut self,
        source: &str,
        pieces: &[WordPieceWithSource],
        arg: &mut Arg,
        quoted: bool,
    ) {
        for piece in pieces {
            let raw = source.get(piece.start_index..piece.end_index).unwrap_or("");
            match &piece.piece {
                WordPiece::Text(text) => {
                    if !quoted && (text.contains(['*', '?', '[']) || is_brace_expansion(text)) {
                        arg.glob = true;
                    }
                    arg.text.push_str(text);
                }
                WordPiece::SingleQuotedText(text) => arg.text.push_str(text),
                WordPiece::AnsiCQuotedText(text) => {
                    // `$'\x72m'` is `rm`: escapes are not decoded here, so the word is unknown.
                    arg.dynamic |= text.contains('\\');
                    arg.text.push_str(text);
                }
                WordPiece::DoubleQuotedSequence(inner)
                | WordPiece::GettextDoubleQuotedSequence(inner) => {
                    self.pieces(source, inner, arg, true)
                }
                WordPiece::TildeExpansion(TildeExpr::Home) => arg.text.push('~'),
                WordPiece::TildeExpansion(TildeExpr::UserHome(user)) => {
                    arg.text.push('~');
                    arg.text.push_str(user);
                }
                WordPiece::TildeExpansion(_) => {
                    arg.dynamic = true;
                    arg.text.push_str(raw);
                }
                WordPiece::ParameterExpansion(expr) => {
                    let home = matches!(
                        expr,
                        ParameterExpr::Parameter { parameter: Parameter::Named(name), indirect: false }
                            if name == "HOME"
                    );
                    if home && arg.text.is_empty() {
                        arg.text.push('~');
                    } else {
                        arg.dynamic = true;
                        arg.text.push_str(raw);
                    }
                    if raw.contains("$(") || raw.contains('`') {
                        self.finding(Verdict::approval(format!(
                            "`{}` runs a command inside a parameter expansion, which is not checked",
                            shorten(raw)
                        )));
                    }
                }
                WordPiece::CommandSubstitution(script)
                | WordPiece::BackquotedCommandSubstitution(script) => {
                    self.isolated(|reader| reader.script(script));
                    arg.dynamic = true;
                    arg.text.push_str(raw);
                }
                WordPiece::EscapeSequence(escaped) => {
                    let c = escaped.strip_prefix('\\').unwrap_or(escaped);
                    if c != "\n" {
                        arg.text.push_str(c);
                    }
                }
                WordPiece::ArithmeticExpression(expr) => {
                    self.arithmetic(&expr.value);
                    arg.dynamic = true;
                    arg.text.push_str(raw);
                }
            }
        }
    }

    /// Arithmetic may hold command substitutions (`$(( $(cmd) ))`), which are not followed.
    pub(super) fn arithmetic(&mut self, expr: &str) {
        if expr.contains("$(") || expr.contains('`') {
            self.finding(Verdict::approval(format!(
                "`{}` runs a command inside arithmetic, which is not checked",
                shorten(expr)
            )));
        }
    }
}

/// A word like `{a,b}` or `{1..3}` that bash expands into several.
fn is_brace_expansion(text: &str) -> bool {
    text.find('{').is_some_and(|open| {
        text[open..].contains('}') && (text.contains(',') || text.contains(".."))
    })
}
