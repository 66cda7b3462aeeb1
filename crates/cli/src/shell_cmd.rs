//! `megastore shell`: an interactive client — choose an entity group, read in any mode,
//! write, run transactions — with line editing and history at a terminal, or commands
//! from a pipe (each echoed, so a transcript reads like a session; any failed command
//! makes the exit status 1).
//!
//! `use G` names an untyped entity group by any bytes, and row commands name keys
//! within it, as the client API does; a group's rows never overlap another group's,
//! typed or untyped (`megastore_schema::keyspace`).

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use comfy_table::Table;
use megastore_client::schema_store::load_catalog;
use megastore_client::{Attempt, Client, Outcome, Transaction, entity_group};
use megastore_config::ClusterConfig;
use megastore_paxos::{DataQuery, ReadMode, ReadPath, ReadResult};
use megastore_rowstore::{KeyRange, Row};
use megastore_rpc::LockdClient;
use megastore_schema::{Catalog, Value};
use megastore_types::{EgId, ReplicaKind};

use crate::bytes_arg::show_bytes;
use crate::cluster_arg::ClusterArg;
use crate::shell_entities as entities;
use crate::shell_input::Input;
use crate::shell_parse::{HELP, ShellCommand, parse_line};

mod indexes;

/// An interactive client of a cluster.
#[derive(Debug, Args)]
pub(crate) struct ShellArgs {
    #[command(flatten)]
    cluster: ClusterArg,
    /// The site to act from (default: the first full replica's).
    #[arg(long, value_name = "SITE")]
    site: Option<String>,
    /// Start on this entity group.
    #[arg(long, value_name = "GROUP")]
    group: Option<String>,
    /// Run these commands (separated by `;` or new lines) and exit: no banner, no
    /// prompts, exit status 1 if any failed. For scripts: `megastore shell -e 'use g; get r'`.
    #[arg(short = 'e', long = "execute", value_name = "COMMANDS")]
    execute: Option<String>,
}

struct Session {
    config: ClusterConfig,
    runtime: tokio::runtime::Runtime,
    client: Client,
    lockd: LockdClient,
    /// The schema, once an entity command needed it (`tables` reloads it).
    catalog: Option<(Arc<Catalog>, u64)>,
    site: String,
    group: Option<EgId>,
    /// The group is an entity group of the schema (chosen by `begin TABLE ROOTKEY`):
    /// its rows are the schema's, so untyped row commands are refused there.
    group_of_schema: bool,
    mode: ReadMode,
    transaction: Option<Transaction>,
}

fn mode_name(mode: ReadMode) -> &'static str {
    match mode {
        ReadMode::Current => "current",
        ReadMode::Snapshot => "snapshot",
        ReadMode::Inconsistent => "inconsistent",
        ReadMode::AtPosition(_) => "at-position",
    }
}

/// How the shell shows a group: an untyped group by its name, a typed one by its prefix.
/// An untyped group by its name (as typed at the shell), a typed one by its root
/// entity (`User(7)`) when the schema is loaded.
fn group_label(catalog: Option<&Catalog>, eg: &EgId) -> String {
    match megastore_client::group_name(eg) {
        Some(name) => show_bytes(&name),
        None => megastore_client::describe_group(catalog, eg),
    }
}

fn path_name(path: ReadPath) -> &'static str {
    match path {
        ReadPath::LocalVouched => "local, vouched by its coordinator",
        ReadPath::Majority => "after asking a majority",
        ReadPath::Snapshot => "snapshot: its last applied position",
        ReadPath::Inconsistent => "inconsistent: whatever it has",
        ReadPath::AtPosition => "at the transaction's position",
    }
}

impl Session {
    fn group(&self) -> anyhow::Result<&EgId> {
        self.group
            .as_ref()
            .context("no entity group chosen: `use GROUP` first")
    }

    /// A key of the chosen untyped group, for a row command.
    fn row_key(&self, row: &[u8]) -> anyhow::Result<Vec<u8>> {
        anyhow::ensure!(
            !self.group_of_schema,
            "this transaction is on an entity group of the schema, whose rows are the \
             schema's: use entity commands (or `use GROUP` for untyped rows outside one)"
        );
        self.group()?;
        Ok(row.to_vec())
    }

    fn rows_table(&self, rows: &[Row]) -> String {
        if rows.is_empty() {
            return "(no rows)".to_string();
        }
        let mut table = Table::new();
        table.load_style(comfy_table::presets::ASCII_MARKDOWN);
        table.set_header(["row", "column", "value"]);
        for row in rows {
            for (column, cell) in &row.cells {
                table.add_row([
                    show_bytes(&row.key),
                    show_bytes(column),
                    show_bytes(&cell.value),
                ]);
            }
        }
        table.to_string()
    }

    fn describe_read(&self, read: &ReadResult) -> String {
        self.describe(read.replica, read.position, read.path)
    }

    /// How a read outside a transaction was served: mode, position, replica and path.
    fn describe(
        &self,
        replica: megastore_types::ReplicaId,
        position: Option<megastore_types::Position>,
        path: ReadPath,
    ) -> String {
        let replica = self
            .config
            .replica_by_id(replica)
            .map_or_else(|| format!("#{}", replica.0), |r| r.name.clone());
        let position = position.map_or_else(
            || "no position".to_string(),
            |p| format!("position {}", p.0),
        );
        format!(
            "{} read at {position} from replica {replica} ({})",
            mode_name(self.mode),
            path_name(path)
        )
    }

    fn read(&mut self, query: DataQuery) -> anyhow::Result<String> {
        if let Some(txn) = self.transaction.as_mut() {
            let rows = match query {
                DataQuery::Rows(rows) => self
                    .runtime
                    .block_on(txn.get(&rows[0]))?
                    .into_iter()
                    .collect(),
                DataQuery::Scan { range, limit, .. } => {
                    self.runtime.block_on(txn.scan(range, limit))?
                }
            };
            return Ok(format!("{}\n(in the transaction)", self.rows_table(&rows)));
        }
        let group = self.group()?.clone();
        let read = self
            .runtime
            .block_on(self.client.read(&group, self.mode, query))?;
        Ok(format!(
            "{}\n{}",
            self.rows_table(&read.rows),
            self.describe_read(&read)
        ))
    }

    fn write(&mut self, row: &[u8], column: &[u8], value: Option<&[u8]>) -> anyhow::Result<String> {
        let key = self.row_key(row)?;
        if let Some(txn) = self.transaction.as_mut() {
            match value {
                Some(value) => txn.set(&key, column, value),
                None => txn.delete(&key, column),
            }?;
            return Ok("staged (commit to apply)".to_string());
        }
        let group = self.group()?.clone();
        let (_, outcome) = self
            .runtime
            .block_on(self.client.transaction(&group, async |txn| match value {
                Some(value) => txn.set(&key, column, value),
                None => txn.delete(&key, column),
            }))?;
        Ok(describe_outcome(&outcome))
    }

    fn send(&mut self, to: &[u8], queue: &str, body: &[u8]) -> anyhow::Result<String> {
        let to = megastore_client::group(to)?;
        if let Some(txn) = self.transaction.as_mut() {
            txn.send(&to, queue, body)?;
            return Ok("staged (sent when the transaction commits)".to_string());
        }
        let group = self.group()?.clone();
        let (_, outcome) = self.runtime.block_on(
            self.client
                .transaction(&group, async |txn| txn.send(&to, queue, body)),
        )?;
        Ok(describe_outcome(&outcome))
    }

    fn receive(&mut self, queue: &str, limit: usize) -> anyhow::Result<String> {
        let show = |messages: &[megastore_client::Message]| {
            if messages.is_empty() {
                return "no messages".to_string();
            }
            messages
                .iter()
                .map(|m| {
                    let from = megastore_client::group_name(&m.sender)
                        .unwrap_or_else(|| m.sender.0.clone());
                    format!(
                        "from {} (sent at {}, #{}): {}",
                        show_bytes(&from),
                        m.sent_at,
                        m.index,
                        show_bytes(&m.body)
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        if let Some(txn) = self.transaction.as_mut() {
            let messages = self.runtime.block_on(txn.receive(queue, limit))?;
            return Ok(format!(
                "{}\n(consumed when the transaction commits)",
                show(&messages)
            ));
        }
        let group = self.group()?.clone();
        let (messages, outcome) = self.runtime.block_on(
            self.client
                .transaction(&group, async |txn| txn.receive(queue, limit).await),
        )?;
        Ok(format!(
            "{}\n{}",
            show(&messages),
            describe_outcome(&outcome)
        ))
    }

    fn catalog(&mut self) -> anyhow::Result<Arc<Catalog>> {
        match &self.catalog {
            Some((catalog, _)) => Ok(Arc::clone(catalog)),
            None => self.reload_catalog(),
        }
    }

    fn reload_catalog(&mut self) -> anyhow::Result<Arc<Catalog>> {
        let (catalog, version) = self
            .runtime
            .block_on(load_catalog(&self.lockd))?
            .context("no schema is applied to this cluster: `megastore schema apply FILE`")?;
        let catalog = Arc::new(catalog);
        self.catalog = Some((Arc::clone(&catalog), version));
        Ok(catalog)
    }

    /// The entity group of an entity of `table` with primary key `key`.
    fn group_of(
        catalog: &Catalog,
        table: &megastore_schema::Table,
        key: &[Value],
    ) -> anyhow::Result<EgId> {
        let root = &key[..catalog.group_key_len(table).min(key.len())];
        Ok(entity_group(catalog, &table.name, root)?)
    }

    /// The typed root key (`root`, as text) of a group of `table`, and that group.
    fn root_group(
        catalog: &Catalog,
        table: &str,
        root: &[String],
    ) -> anyhow::Result<(Vec<Value>, EgId)> {
        let t = entities::table(catalog, table)?;
        let group_len = catalog.group_key_len(t);
        anyhow::ensure!(
            root.len() == group_len,
            "a {table}'s entity group is named by {group_len} key value(s), got {}",
            root.len()
        );
        let root = entities::key(t, root, false)?;
        let eg = Self::group_of(catalog, t, &root)?;
        Ok((root, eg))
    }

    fn entity_command(&mut self, command: ShellCommand) -> anyhow::Result<String> {
        let catalog = self.catalog()?;
        let mode = self.mode;
        Ok(match command {
            ShellCommand::EntityGet { table, key } => {
                let t = entities::table(&catalog, &table)?;
                let key = entities::key(t, &key, true)?;
                let (found, how) = match self.transaction.as_mut() {
                    Some(txn) => (
                        self.runtime
                            .block_on(txn.get_entity(&catalog, &table, &key))?,
                        "(in the transaction)".to_string(),
                    ),
                    None => {
                        let read = self
                            .runtime
                            .block_on(self.client.read_entity(&catalog, mode, &table, &key))?;
                        let how = self.describe(read.replica, read.position, read.path);
                        (read.entity, how)
                    }
                };
                format!("{}\n{how}", entities::render(&catalog, t, found.as_slice()))
            }
            ShellCommand::EntityPut { table, fields } => {
                let t = entities::table(&catalog, &table)?;
                let entity = entities::entity(t, &fields)?;
                if let Some(txn) = self.transaction.as_mut() {
                    self.runtime.block_on(txn.put_entity(&catalog, &entity))?;
                    return Ok("staged (commit to apply)".to_string());
                }
                let key = catalog.primary_key_of(&entity)?;
                let eg = Self::group_of(&catalog, t, &key)?;
                let (_, outcome) =
                    self.runtime
                        .block_on(self.client.transaction(&eg, async |txn| {
                            txn.put_entity(&catalog, &entity).await
                        }))?;
                describe_outcome(&outcome)
            }
            ShellCommand::EntityDelete { table, key } => {
                let t = entities::table(&catalog, &table)?;
                let key = entities::key(t, &key, true)?;
                let (existed, outcome) = match self.transaction.as_mut() {
                    Some(txn) => (
                        self.runtime
                            .block_on(txn.delete_entity(&catalog, &table, &key))?,
                        None,
                    ),
                    None => {
                        let eg = Self::group_of(&catalog, t, &key)?;
                        let (existed, outcome) =
                            self.runtime
                                .block_on(self.client.transaction(&eg, async |txn| {
                                    txn.delete_entity(&catalog, &table, &key).await
                                }))?;
                        (existed, Some(outcome))
                    }
                };
                match (existed, outcome) {
                    (false, _) => format!("no such {table}"),
                    (true, None) => "staged (commit to apply)".to_string(),
                    (true, Some(outcome)) => describe_outcome(&outcome),
                }
            }
            ShellCommand::EntityScan { table, root, limit } => {
                let t = entities::table(&catalog, &table)?;
                let (root, eg) = Self::root_group(&catalog, &table, &root)?;
                let found = match self.transaction.as_mut() {
                    Some(txn) => self.runtime.block_on(txn.scan_table(
                        &catalog,
                        &table,
                        &root,
                        Some(limit),
                    ))?,
                    None => {
                        let mut txn = self.client.begin(&eg);
                        self.runtime.block_on(txn.scan_table(
                            &catalog,
                            &table,
                            &root,
                            Some(limit),
                        ))?
                    }
                };
                entities::render(&catalog, t, &found)
            }
            ShellCommand::IndexScan(args) => self.index_scan(&catalog, args)?,
            ShellCommand::IndexJoin {
                queries,
                limit,
                verify,
            } => self.index_join(&catalog, &queries, limit, verify)?,
            _ => unreachable!("only entity commands come here"),
        })
    }

    fn execute(&mut self, command: ShellCommand) -> anyhow::Result<String> {
        Ok(match command {
            ShellCommand::Tables => {
                let catalog = self.reload_catalog()?;
                let version = self.catalog.as_ref().map_or(0, |(_, v)| *v);
                entities::describe(&catalog, version)
            }
            command @ (ShellCommand::EntityGet { .. }
            | ShellCommand::EntityPut { .. }
            | ShellCommand::EntityDelete { .. }
            | ShellCommand::EntityScan { .. }
            | ShellCommand::IndexScan(_)
            | ShellCommand::IndexJoin { .. }) => self.entity_command(command)?,
            ShellCommand::Help => HELP.trim_end().to_string(),
            ShellCommand::Quit => String::new(),
            ShellCommand::Show => format!(
                "group {}, {} reads, site {}, {}",
                self.group.as_ref().map_or_else(
                    || "(none)".to_string(),
                    |g| group_label(self.catalog.as_ref().map(|(c, _)| c.as_ref()), g)
                ),
                mode_name(self.mode),
                self.site,
                if self.transaction.is_some() {
                    "a transaction is open"
                } else {
                    "no transaction"
                }
            ),
            ShellCommand::Use(group) => {
                anyhow::ensure!(
                    self.transaction.is_none(),
                    "a transaction is open on this group: commit or abort it first"
                );
                let shown = show_bytes(&group);
                self.group = Some(megastore_client::group(&group)?);
                self.group_of_schema = false;
                format!("using entity group {shown}")
            }
            ShellCommand::Site(site) => {
                anyhow::ensure!(
                    self.transaction.is_none(),
                    "a transaction is open: commit or abort it first"
                );
                self.client = self
                    .runtime
                    .block_on(Client::connect(&self.config, &site))?;
                self.site = site;
                format!("acting from site {}", self.site)
            }
            ShellCommand::Mode(mode) => {
                self.mode = mode;
                let note = if self.transaction.is_some() {
                    " (the open transaction reads current data regardless)"
                } else {
                    ""
                };
                format!("reads are {}{note}", mode_name(mode))
            }
            ShellCommand::Get(row) => {
                let key = self.row_key(&row)?;
                self.read(DataQuery::Rows(vec![key]))?
            }
            ShellCommand::Scan { prefix, limit } => {
                let start = self.row_key(&prefix)?;
                let range = KeyRange::prefix(start);
                self.read(DataQuery::Scan {
                    range,
                    limit: Some(limit),
                    reverse: false,
                })?
            }
            ShellCommand::Put { row, column, value } => self.write(&row, &column, Some(&value))?,
            ShellCommand::Send { to, queue, body } => self.send(&to, &queue, &body)?,
            ShellCommand::Receive { queue, limit } => self.receive(&queue, limit)?,
            ShellCommand::Deliver => {
                let group = self.group()?.clone();
                let done = self.runtime.block_on(self.client.deliver(&group))?;
                let skipped = if done.skipped.is_empty() {
                    String::new()
                } else {
                    format!("; {} receivers to try again", done.skipped.len())
                };
                format!(
                    "delivered {} messages ({} were there already){skipped}{}",
                    done.delivered,
                    done.already,
                    if done.more { "; more wait" } else { "" }
                )
            }
            ShellCommand::Delete { row, column } => self.write(&row, &column, None)?,
            ShellCommand::Begin(of_entity) => {
                anyhow::ensure!(self.transaction.is_none(), "a transaction is already open");
                if let Some((table, root)) = of_entity {
                    let catalog = self.catalog()?;
                    self.group = Some(Self::root_group(&catalog, &table, &root)?.1);
                    self.group_of_schema = true;
                }
                let group = self.group()?.clone();
                self.transaction = Some(self.client.begin(&group));
                let catalog = self.catalog.as_ref().map(|(c, _)| c.as_ref());
                format!("transaction begun on {}", group_label(catalog, &group))
            }
            ShellCommand::Commit => {
                let txn = self.transaction.take().context("no transaction is open")?;
                match self.runtime.block_on(txn.commit())? {
                    Attempt::Done(outcome) => describe_outcome(&outcome),
                    Attempt::Retry { keys, .. } if keys.is_empty() => {
                        "not committed: another write came first; nothing was applied, begin again"
                            .to_string()
                    }
                    Attempt::Retry { keys, .. } => {
                        let names: Vec<String> = keys.iter().map(|k| show_bytes(k)).collect();
                        format!(
                            "not committed: conflict on {} (written since this transaction read them); \
                             nothing was applied, begin again",
                            names.join(", ")
                        )
                    }
                }
            }
            ShellCommand::Abort => {
                self.transaction.take().context("no transaction is open")?;
                "transaction dropped; nothing was written".to_string()
            }
        })
    }
}

fn describe_outcome(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Committed { position, txn, .. } => format!(
            "committed at log position {} (transaction {}:{})",
            position.0, txn.client.0, txn.seq
        ),
        Outcome::ReadOnly => "nothing to commit (the transaction only read)".to_string(),
    }
}

pub(crate) fn run(args: ShellArgs) -> anyhow::Result<ExitCode> {
    let config = args.cluster.load()?;
    let site = match args.site {
        Some(site) => site,
        None => config
            .replicas
            .iter()
            .find(|r| r.kind == ReplicaKind::Full)
            .map(|r| r.site.clone())
            .context("the config has no full replica")?,
    };
    let group = crate::bytes_arg::group_flag(args.group.as_deref())?;
    crate::logging::init_quiet();
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let client = runtime
        .block_on(Client::connect(&config, &site))
        .with_context(|| format!("connecting at site {site} (is the cluster up?)"))?;
    // Its channels are made inside the runtime that drives them.
    let lockd = {
        let _entered = runtime.enter();
        LockdClient::new(&config).map_err(anyhow::Error::msg)?
    };
    let mut session = Session {
        config,
        runtime,
        client,
        lockd,
        catalog: None,
        site,
        group,
        group_of_schema: false,
        mode: ReadMode::Current,
        transaction: None,
    };
    let mut input = match &args.execute {
        Some(commands) => Input::script(commands).map_err(anyhow::Error::msg)?,
        None => Input::open()?,
    };
    let piped = !matches!(input, Input::Terminal(..));
    if !piped {
        println!(
            "megastore shell on cluster {:?}, site {}; `help` lists the commands",
            session.config.cluster.name, session.site
        );
    }
    let mut failed = 0usize;
    loop {
        let catalog = session.catalog.as_ref().map(|(c, _)| c.as_ref());
        let prompt = match (&session.group, &session.transaction) {
            (Some(g), Some(_)) => format!("{} (txn)> ", group_label(catalog, g)),
            (Some(g), None) => format!("{}> ", group_label(catalog, g)),
            (None, _) => "megastore> ".to_string(),
        };
        let Some(line) = input.line(&prompt)? else {
            break;
        };
        let command = match parse_line(&line) {
            Ok(Some(command)) => command,
            Ok(None) => continue,
            Err(e) => {
                failed += 1;
                println!("error: {e}");
                continue;
            }
        };
        if command == ShellCommand::Quit {
            break;
        }
        match session.execute(command) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                failed += 1;
                println!("error: {e:#}");
            }
        }
    }
    if session.transaction.is_some() {
        println!("the open transaction was dropped; nothing of it was written");
    }
    input.close();
    Ok(if piped && failed > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
