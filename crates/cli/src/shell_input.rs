//! Where the shell's commands come from: a line editor with history at a terminal, or
//! plain lines from a pipe (each echoed after its prompt, so the output reads like a
//! session).

use std::io::{BufRead, IsTerminal};

use anyhow::Context;

/// Where input comes from: a line editor at a terminal, plain lines otherwise.
pub(crate) enum Input {
    Terminal(Box<rustyline::DefaultEditor>, Option<std::path::PathBuf>),
    Piped(std::io::StdinLock<'static>),
}

impl Input {
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
