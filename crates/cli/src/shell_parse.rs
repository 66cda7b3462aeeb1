//! The shell's command language: one command per line, words split at whitespace
//! (quotes keep spaces), keys and values as text with `\xHH` escapes.

use megastore_paxos::ReadMode;

use crate::bytes_arg::parse_bytes;

/// One command typed at the shell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ShellCommand {
    /// List the commands.
    Help,
    /// Leave the shell.
    Quit,
    /// Work on this entity group.
    Use(Vec<u8>),
    /// Act as a client at this site.
    Site(String),
    /// Read outside transactions in this mode.
    Mode(ReadMode),
    /// Show where the shell stands.
    Show,
    /// Read one row.
    Get(Vec<u8>),
    /// Read the rows whose names start with a prefix.
    Scan { prefix: Vec<u8>, limit: usize },
    /// Set one cell.
    Put {
        row: Vec<u8>,
        column: Vec<u8>,
        value: Vec<u8>,
    },
    /// Delete one cell.
    Delete { row: Vec<u8>, column: Vec<u8> },
    /// Start a transaction on the current group, or on the group of an entity of the
    /// schema (a table and the root key of its group).
    Begin(Option<(String, Vec<String>)>),
    /// Commit the open transaction.
    Commit,
    /// Drop the open transaction.
    Abort,
    /// Read one entity of the schema by its primary key (as typed text).
    EntityGet { table: String, key: Vec<String> },
    /// Write one entity: `column=value` pairs (a repeated column once per element).
    EntityPut {
        table: String,
        fields: Vec<(String, String)>,
    },
    /// Delete one entity by its primary key.
    EntityDelete { table: String, key: Vec<String> },
    /// The entities of a table in one entity group (named by its root key).
    EntityScan {
        table: String,
        root: Vec<String>,
        limit: usize,
    },
    /// The entries of an index whose leading values are these: a global index across
    /// every group (`verify`: checked against each hit's entity), a local or inline
    /// one in the group its values name.
    IndexScan(IndexScanArgs),
    /// The entities every one of several global index queries finds (a merge-join).
    IndexJoin {
        /// Each query: an index and a value for each of its columns.
        queries: Vec<(String, Vec<String>)>,
        limit: usize,
        verify: bool,
    },
    /// Show the schema's tables.
    Tables,
    /// Send a message from the current group to a queue of another (untyped) group.
    Send {
        to: Vec<u8>,
        queue: String,
        body: Vec<u8>,
    },
    /// Receive (and consume) messages of a queue of the current group.
    Receive { queue: String, limit: usize },
    /// Deliver the current group's outbox now.
    Deliver,
}

/// An index scan as typed: the values, and the range on the next column as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IndexScanArgs {
    pub(crate) index: String,
    pub(crate) values: Vec<String>,
    /// The next column's smallest value, and whether it is included (`--from`, `--after`).
    pub(crate) lower: Option<(String, bool)>,
    /// Its largest (`--to`, `--before`).
    pub(crate) upper: Option<(String, bool)>,
    pub(crate) reverse: bool,
    pub(crate) limit: usize,
    /// A page token (hex) a previous scan printed.
    pub(crate) page: Option<String>,
    pub(crate) verify: bool,
}

/// Rows a scan shows when it is given no limit.
pub(crate) const SCAN_LIMIT_DEFAULT: usize = 100;

/// What `help` prints.
pub(crate) const HELP: &str = "\
commands (keys and values are text; \\xHH for any byte; quote words with spaces):
  use GROUP                  work on entity group GROUP
  get ROW                    read a row (in a transaction: at its position)
  scan [PREFIX] [LIMIT]      read the rows whose names start with PREFIX (default limit 100)
  put ROW COLUMN VALUE       set a cell (outside a transaction: committed at once)
  delete ROW COLUMN          delete a cell (outside a transaction: committed at once)
  begin [TABLE ROOTKEY...]   start a transaction on the group (or on the entity group
                             of ROOTKEY): reads from one position, writes buffered
                             until commit
  commit                     commit it (a conflict names the rows written in between)
  abort                      drop it
  entity get TABLE KEY...    read an entity of the schema by its primary key
  entity put TABLE COL=VALUE...
                             write an entity (a repeated column once per element);
                             outside a transaction: committed at once
  entity delete TABLE KEY... delete an entity
  entity scan TABLE ROOTKEY... [--limit N]
                             the table's entities in the group of ROOTKEY
  index scan INDEX VALUE... [--from V|--after V] [--to V|--before V] [--reverse]
             [--limit N] [--page TOKEN] [--verify]
                             an index's entries whose leading values these are, the
                             next column in a range: a global index across groups
                             (--verify: no stale hit), a local one in the group its
                             values start with; --page continues where one ended
  index join INDEX VALUE... + INDEX VALUE... [--limit N] [--verify]
                             the entities every global index query finds (a value
                             for each index column; merge-join in key order)
  send GROUP QUEUE BODY      send a message to QUEUE of GROUP (in a transaction: when it
                             commits; outside one: committed at once)
  receive QUEUE [LIMIT]      receive the group's messages (default limit 10): consumed
                             when the transaction commits (outside one: at once)
  deliver                    deliver the group's sent messages now (the replicas do
                             it by themselves within a second or so)
  tables                     the schema's tables, keys and columns
  mode current|snapshot|inconsistent
                             how reads outside a transaction are served
  site SITE                  act as a client at another site
  show                       the group, mode, site and open transaction
  help                       this list
  quit                       leave (also Ctrl-D)
";

fn bytes(word: &str, what: &str) -> Result<Vec<u8>, String> {
    parse_bytes(word).map_err(|e| format!("{what}: {e}"))
}

fn arity(
    command: &str,
    words: &[String],
    usage: &str,
    min: usize,
    max: usize,
) -> Result<(), String> {
    let given = words.len() - 1;
    if given < min || given > max {
        return Err(format!("{command} takes {usage}"));
    }
    Ok(())
}

/// Splits a line into words at whitespace; single or double quotes keep spaces in a
/// word. Unlike a POSIX shell, a backslash stays in the word (with the character after
/// it, so `\"` does not end a quote): escapes are the byte syntax's, read later.
fn split_words(line: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quote: Option<char> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (_, '\\') => {
                let word = word.get_or_insert_with(String::new);
                word.push('\\');
                if let Some(next) = chars.next() {
                    word.push(next);
                }
            }
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.get_or_insert_with(String::new).push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (None, c) if c.is_whitespace() => words.extend(word.take()),
            (None, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    if let Some(q) = quote {
        return Err(format!("unbalanced quotes: a {q} is never closed"));
    }
    words.extend(word);
    Ok(words)
}

/// Takes `--limit N` out of `words`: N, or the default without one.
fn take_limit(words: &mut Vec<String>) -> Result<usize, String> {
    let Some(at) = words.iter().position(|w| w == "--limit") else {
        return Ok(SCAN_LIMIT_DEFAULT);
    };
    let n = words.get(at + 1).ok_or("--limit needs a number")?;
    let limit = n
        .parse::<usize>()
        .ok()
        .filter(|l| *l > 0)
        .ok_or_else(|| format!("the limit {n:?} is not a positive number"))?;
    words.drain(at..at + 2);
    Ok(limit)
}

/// Takes `flag` and the word after it out of `words`.
fn take_value(words: &mut Vec<String>, flag: &str) -> Result<Option<String>, String> {
    let Some(at) = words.iter().position(|w| w == flag) else {
        return Ok(None);
    };
    let value = words
        .get(at + 1)
        .cloned()
        .ok_or_else(|| format!("{flag} needs a value"))?;
    words.drain(at..at + 2);
    Ok(Some(value))
}

/// Takes `flag` out of `words`: whether it was there.
fn take_flag(words: &mut Vec<String>, flag: &str) -> bool {
    match words.iter().position(|w| w == flag) {
        Some(at) => {
            words.remove(at);
            true
        }
        None => false,
    }
}

/// One end of a range: `inclusive` or `exclusive` flag, not both.
fn take_bound(
    words: &mut Vec<String>,
    inclusive: &str,
    exclusive: &str,
) -> Result<Option<(String, bool)>, String> {
    match (take_value(words, inclusive)?, take_value(words, exclusive)?) {
        (Some(_), Some(_)) => Err(format!("give {inclusive} or {exclusive}, not both")),
        (Some(v), None) => Ok(Some((v, true))),
        (None, Some(v)) => Ok(Some((v, false))),
        (None, None) => Ok(None),
    }
}

fn parse_index(words: &[String]) -> Result<ShellCommand, String> {
    let usage = "index scan INDEX VALUE... [--from V|--after V] [--to V|--before V] [--reverse] [--limit N] [--page TOKEN] [--verify], or index join INDEX VALUE... + INDEX VALUE... (type help)";
    let (Some(verb), Some(index)) = (words.get(1).map(String::as_str), words.get(2)) else {
        return Err(usage.to_string());
    };
    let mut values = words[3..].to_vec();
    let limit = take_limit(&mut values)?;
    let verify = take_flag(&mut values, "--verify");
    match verb {
        "scan" => {
            let lower = take_bound(&mut values, "--from", "--after")?;
            let upper = take_bound(&mut values, "--to", "--before")?;
            let reverse = take_flag(&mut values, "--reverse");
            let page = take_value(&mut values, "--page")?;
            if let Some(flag) = values.iter().find(|w| w.starts_with("--")) {
                return Err(format!("unknown option {flag}: {usage}"));
            }
            Ok(ShellCommand::IndexScan(IndexScanArgs {
                index: index.clone(),
                values,
                lower,
                upper,
                reverse,
                limit,
                page,
                verify,
            }))
        }
        "join" => {
            let mut queries = Vec::new();
            let mut words = std::iter::once(index.clone()).chain(values).peekable();
            while let Some(index) = words.next() {
                let values: Vec<String> =
                    std::iter::from_fn(|| words.next_if(|w| w != "+")).collect();
                words.next(); // the `+` between queries
                queries.push((index, values));
            }
            if queries.len() < 2 {
                return Err(format!(
                    "a join needs two queries or more, joined by +: {usage}"
                ));
            }
            Ok(ShellCommand::IndexJoin {
                queries,
                limit,
                verify,
            })
        }
        _ => Err(usage.to_string()),
    }
}

fn parse_entity(words: &[String]) -> Result<ShellCommand, String> {
    let usage = "entity get|put|delete|scan TABLE ... (type help)";
    let (Some(verb), Some(table)) = (words.get(1), words.get(2)) else {
        return Err(usage.to_string());
    };
    let table = table.clone();
    let rest = &words[3..];
    Ok(match verb.to_ascii_lowercase().as_str() {
        "get" | "delete" if rest.is_empty() => {
            return Err(format!("entity {verb} needs the primary key of a {table}"));
        }
        "get" => ShellCommand::EntityGet {
            table,
            key: rest.to_vec(),
        },
        "delete" => ShellCommand::EntityDelete {
            table,
            key: rest.to_vec(),
        },
        "put" => {
            let fields = rest
                .iter()
                .map(|w| {
                    w.split_once('=')
                        .map(|(c, v)| (c.to_string(), v.to_string()))
                        .ok_or_else(|| format!("{w:?} is not COLUMN=VALUE"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            if fields.is_empty() {
                return Err(format!("entity put needs the columns of a {table}"));
            }
            ShellCommand::EntityPut { table, fields }
        }
        "scan" => {
            let mut root = rest.to_vec();
            let limit = take_limit(&mut root)?;
            if root.is_empty() {
                return Err(format!(
                    "entity scan needs the root key of a {table}'s group"
                ));
            }
            ShellCommand::EntityScan { table, root, limit }
        }
        _ => return Err(usage.to_string()),
    })
}

/// Parses one line; `Ok(None)` for a blank line or a comment (`#`).
pub(crate) fn parse_line(line: &str) -> Result<Option<ShellCommand>, String> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    let words = split_words(line)?;
    let Some(first) = words.first() else {
        return Ok(None);
    };
    let command = first.to_ascii_lowercase();
    let check = |usage: &str, min, max| arity(&command, &words, usage, min, max);
    let parsed = match command.as_str() {
        "help" | "?" => ShellCommand::Help,
        "quit" | "exit" => ShellCommand::Quit,
        "show" => ShellCommand::Show,
        "begin" => match words.get(1) {
            None => ShellCommand::Begin(None),
            Some(table) if words.len() > 2 => {
                ShellCommand::Begin(Some((table.clone(), words[2..].to_vec())))
            }
            Some(_) => return Err("begin takes nothing, or TABLE ROOTKEY...".to_string()),
        },
        "commit" => ShellCommand::Commit,
        "abort" | "rollback" => ShellCommand::Abort,
        "use" => {
            check("one entity group", 1, 1)?;
            ShellCommand::Use(bytes(&words[1], "the group")?)
        }
        "site" => {
            check("one site name", 1, 1)?;
            ShellCommand::Site(words[1].clone())
        }
        "mode" => {
            check("current, snapshot or inconsistent", 1, 1)?;
            ShellCommand::Mode(match words[1].to_ascii_lowercase().as_str() {
                "current" => ReadMode::Current,
                "snapshot" => ReadMode::Snapshot,
                "inconsistent" => ReadMode::Inconsistent,
                other => {
                    return Err(format!(
                        "unknown read mode {other:?}: current, snapshot or inconsistent"
                    ));
                }
            })
        }
        "get" => {
            check("one row", 1, 1)?;
            ShellCommand::Get(bytes(&words[1], "the row")?)
        }
        "scan" => {
            check("[PREFIX] [LIMIT]", 0, 2)?;
            let prefix = words
                .get(1)
                .map_or(Ok(Vec::new()), |w| bytes(w, "the prefix"))?;
            let limit = match words.get(2) {
                None => SCAN_LIMIT_DEFAULT,
                Some(w) => w
                    .parse::<usize>()
                    .ok()
                    .filter(|l| *l > 0)
                    .ok_or_else(|| format!("the limit {w:?} is not a positive number"))?,
            };
            ShellCommand::Scan { prefix, limit }
        }
        "put" | "set" => {
            check("ROW COLUMN VALUE", 3, 3)?;
            ShellCommand::Put {
                row: bytes(&words[1], "the row")?,
                column: bytes(&words[2], "the column")?,
                value: bytes(&words[3], "the value")?,
            }
        }
        "delete" | "del" => {
            check("ROW COLUMN", 2, 2)?;
            ShellCommand::Delete {
                row: bytes(&words[1], "the row")?,
                column: bytes(&words[2], "the column")?,
            }
        }
        "tables" => ShellCommand::Tables,
        "send" => {
            check("GROUP QUEUE BODY", 3, 3)?;
            ShellCommand::Send {
                to: bytes(&words[1], "the group")?,
                queue: words[2].clone(),
                body: bytes(&words[3], "the body")?,
            }
        }
        "receive" => {
            check("QUEUE [LIMIT]", 1, 2)?;
            let limit = match words.get(2) {
                None => 10,
                Some(w) => w
                    .parse::<usize>()
                    .ok()
                    .filter(|l| *l > 0)
                    .ok_or_else(|| format!("the limit {w:?} is not a positive number"))?,
            };
            ShellCommand::Receive {
                queue: words[1].clone(),
                limit,
            }
        }
        "deliver" => ShellCommand::Deliver,
        "entity" => parse_entity(&words)?,
        "index" => parse_index(&words)?,
        other => return Err(format!("unknown command {other:?} (type help)")),
    };
    if matches!(
        parsed,
        ShellCommand::Help
            | ShellCommand::Quit
            | ShellCommand::Show
            | ShellCommand::Commit
            | ShellCommand::Abort
            | ShellCommand::Tables
            | ShellCommand::Deliver
    ) && words.len() > 1
    {
        return Err(format!("{command} takes no arguments"));
    }
    Ok(Some(parsed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_parse() {
        assert_eq!(parse_line("  "), Ok(None));
        assert_eq!(parse_line("# a comment"), Ok(None));
        assert_eq!(parse_line("HELP"), Ok(Some(ShellCommand::Help)));
        assert_eq!(
            parse_line(r#"send bob mail "hi there""#),
            Ok(Some(ShellCommand::Send {
                to: b"bob".to_vec(),
                queue: "mail".into(),
                body: b"hi there".to_vec(),
            }))
        );
        assert_eq!(
            parse_line("receive mail 3"),
            Ok(Some(ShellCommand::Receive {
                queue: "mail".into(),
                limit: 3,
            }))
        );
        assert!(
            parse_line("receive mail 0")
                .unwrap_err()
                .contains("positive")
        );
        assert!(
            parse_line("deliver now")
                .unwrap_err()
                .contains("no arguments")
        );
        assert_eq!(
            parse_line(r#"put alice name "Alice Liddell""#),
            Ok(Some(ShellCommand::Put {
                row: b"alice".to_vec(),
                column: b"name".to_vec(),
                value: b"Alice Liddell".to_vec(),
            }))
        );
        assert_eq!(
            parse_line(r"use user\x00\xff"),
            Ok(Some(ShellCommand::Use(b"user\x00\xff".to_vec())))
        );
        assert_eq!(
            parse_line(r#"put "a \" b" '' x"#),
            Ok(Some(ShellCommand::Put {
                row: b"a \" b".to_vec(),
                column: Vec::new(),
                value: b"x".to_vec(),
            }))
        );
        assert_eq!(
            parse_line("scan"),
            Ok(Some(ShellCommand::Scan {
                prefix: Vec::new(),
                limit: SCAN_LIMIT_DEFAULT
            }))
        );
        assert_eq!(
            parse_line("scan p 5"),
            Ok(Some(ShellCommand::Scan {
                prefix: b"p".to_vec(),
                limit: 5
            }))
        );
        assert_eq!(
            parse_line("entity put Photo user_id=1 tag=a tag=b full_url=\"x y\""),
            Ok(Some(ShellCommand::EntityPut {
                table: "Photo".into(),
                fields: vec![
                    ("user_id".into(), "1".into()),
                    ("tag".into(), "a".into()),
                    ("tag".into(), "b".into()),
                    ("full_url".into(), "x y".into()),
                ],
            }))
        );
        assert_eq!(
            parse_line("entity scan Photo 7 --limit 3"),
            Ok(Some(ShellCommand::EntityScan {
                table: "Photo".into(),
                root: vec!["7".into()],
                limit: 3,
            }))
        );
        assert_eq!(
            parse_line("mode Snapshot"),
            Ok(Some(ShellCommand::Mode(ReadMode::Snapshot)))
        );
    }

    #[test]
    fn mistakes_get_a_clear_error() {
        let error = |line: &str| parse_line(line).unwrap_err();
        assert!(error("frobnicate").contains("unknown command"));
        assert!(error("put a b").contains("ROW COLUMN VALUE"));
        assert!(error("get").contains("one row"));
        assert!(error("scan p 0").contains("positive"));
        assert!(error("mode fast").contains("unknown read mode"));
        assert!(error("commit now").contains("no arguments"));
        assert!(error("put 'a b").contains("quotes"));
        assert!(error(r"get a\xZZ").contains("the row"));
        assert!(error("get 'a").contains("never closed"));
        assert!(error("entity").contains("entity get|put"));
        assert!(error("entity get Photo").contains("primary key"));
        assert!(error("entity put User name").contains("COLUMN=VALUE"));
        assert!(error("entity scan Photo 1 --limit 0").contains("positive"));
        assert!(error("entity frob Photo 1").contains("entity get|put"));
        assert!(error("index").contains("index scan INDEX"));
        assert!(error("index scan T x --limit 0").contains("positive"));
    }

    #[test]
    fn index_scans_parse() {
        assert_eq!(
            parse_line("index scan PhotosByTag sea --limit 5 --verify"),
            Ok(Some(ShellCommand::IndexScan(IndexScanArgs {
                index: "PhotosByTag".into(),
                values: vec!["sea".into()],
                lower: None,
                upper: None,
                reverse: false,
                limit: 5,
                page: None,
                verify: true,
            })))
        );
        assert_eq!(
            parse_line("index scan PhotosByTime 7 --after 10 --to 20 --reverse --page 0a"),
            Ok(Some(ShellCommand::IndexScan(IndexScanArgs {
                index: "PhotosByTime".into(),
                values: vec!["7".into()],
                lower: Some(("10".into(), false)),
                upper: Some(("20".into(), true)),
                reverse: true,
                limit: SCAN_LIMIT_DEFAULT,
                page: Some("0a".into()),
                verify: false,
            })))
        );
        assert_eq!(
            parse_line("index join PhotosByTag sea + PhotosByTag sun --limit 3"),
            Ok(Some(ShellCommand::IndexJoin {
                queries: vec![
                    ("PhotosByTag".into(), vec!["sea".into()]),
                    ("PhotosByTag".into(), vec!["sun".into()]),
                ],
                limit: 3,
                verify: false,
            }))
        );
        let error = |line: &str| parse_line(line).unwrap_err();
        assert!(error("index scan T 1 --from 1 --after 2").contains("not both"));
        assert!(error("index scan T 1 --sideways").contains("unknown option --sideways"));
        assert!(error("index join T 1").contains("two queries"));
    }
}
