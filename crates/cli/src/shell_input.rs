//! Where the shell's commands come from: a line editor with history at a terminal,
//! plain lines from a pipe (each echoed after its prompt, so the output reads like a
//! session), or the commands given with `-e` (run as they are, no prompts).

use std::io::{BufRead, IsTerminal};

use anyhow::Context;

/// Where input comes from: a line editor at a terminal, plain lines otherwise, or the
/// commands of `-e` (run without prompts).
pub(crate) enum Input {
    Terminal(Box<rustyline::DefaultEditor>, Option<std::path::PathBuf>),
    Piped(std::io::StdinLock<'static>),
    Script(std::collections::VecDeque<String>),
}

impl Input {
    /// The commands of `text`, separated by new lines or by `;` outside quotes.
    pub(crate) fn script(text: &str) -> Result<Self, String> {
        let mut commands = std::collections::VecDeque::new();
        let mut current = String::new();
        let mut quote = None;
        for c in text.chars() {
            match (c, quote) {
                ('\'', None) | ('"', None) => {
                    quote = Some(c);
                    current.push(c);
                }
                (c, Some(q)) if c == q => {
                    quote = None;
                    current.push(c);
                }
                (';' | '\n', None) => commands.push_back(std::mem::take(&mut current)),
                _ => current.push(c),
            }
        }
        if quote.is_some() {
            return Err("-e: a quote is never closed".into());
        }
        commands.push_back(current);
        Ok(Input::Script(commands))
    }

    pub(crate) fn open() -> anyhow::Result<Self> {
        if !std::io::stdin().is_terminal() {
            return Ok(Input::Piped(std::io::stdin().lock()));
        }
        let mut editor = rustyline::DefaultEditor::new().context("starting the line editor")?;
        let history = std::env::var_os("HOME")
            .map(|home| std::path::PathBuf::from(home).join(".megastore_history"));
        if let Some(path) = &history {
            let _ = editor.load_history(path);
        }
        Ok(Input::Terminal(Box::new(editor), history))
    }

    /// The next line; `None` at the end of input.
    pub(crate) fn line(&mut self, prompt: &str) -> anyhow::Result<Option<String>> {
        match self {
            Input::Terminal(editor, _) => match editor.readline(prompt) {
                Ok(line) => {
                    let _ = editor.add_history_entry(line.as_str());
                    Ok(Some(line))
                }
                // Ctrl-C drops the line being typed, as in other shells.
                Err(rustyline::error::ReadlineError::Interrupted) => Ok(Some(String::new())),
                Err(rustyline::error::ReadlineError::Eof) => Ok(None),
                Err(e) => Err(e).context("reading a command"),
            },
            Input::Script(commands) => Ok(commands.pop_front()),
            Input::Piped(stdin) => {
                let mut line = String::new();
                if stdin.read_line(&mut line).context("reading a command")? == 0 {
                    return Ok(None);
                }
                let line = line.trim_end_matches(['\n', '\r']).to_string();
                println!("{prompt}{line}");
                Ok(Some(line))
            }
        }
    }

    pub(crate) fn close(self) {
        if let Input::Terminal(mut editor, Some(path)) = self {
            let _ = editor.save_history(&path);
        }
    }
}
