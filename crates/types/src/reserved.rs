//! The reserved bytes of the row key space that the protocol core must know as well
//! as the schema (`megastore_schema::keyspace` names and documents every reserved
//! byte, and re-exports these).

/// The first byte of every untyped group's prefix: `0xFE ‖ escape(name)`.
pub const UNTYPED_GROUP_TAG: u8 = 0xFE;

/// The first byte of the system's rows (a replica's registry and open index of its
/// groups, the store's layout marker): outside every entity group.
pub const SYSTEM_TAG: u8 = 0xFF;

/// The first byte of every global index entry's row: `0xFD ‖ id(index) ‖ key(values)
/// ‖ key(primary key)`, outside every entity group.
pub const GLOBAL_INDEX_TAG: u8 = 0xFD;

/// Inside a group, the object id (long form of `u32::MAX − 1`, which no schema hands
/// out) under which the group keeps its *mirror* of the global index entries it owns:
/// row `G ‖ 0xF8 FFFFFFFE ‖ global row key`, with the global row's cells. The mirror
/// is group data — written by the group's log entries, carried by its snapshots,
/// collected with it — and every full and read-only replica copies each mirror write
/// to the global row it names when it applies (or installs) it.
pub const GLOBAL_MIRROR_OBJECT: [u8; 5] = [0xF8, 0xFF, 0xFF, 0xFF, 0xFE];

/// Inside a group, the object id (long form of `u32::MAX − 2`, which no schema hands
/// out) under which the group keeps its queues: its *outbox* of messages it sent
/// (`G ‖ 0xF8 FFFFFFFD ‖ 0x01 ‖ sender txn ‖ index`), its *inbox* of messages delivered
/// to it (`… ‖ 0x02 ‖ queue ‖ sender group ‖ sender position ‖ index`), and per sender
/// the last message delivered (`… ‖ 0x03 ‖ sender group`). Group data like any other:
/// written by log entries, carried by snapshots (docs/protocol.md, "Queues").
pub const QUEUE_OBJECT: [u8; 5] = [0xF8, 0xFF, 0xFF, 0xFF, 0xFD];

/// Inside a group, the object id (long form of `u32::MAX − 3`, which no schema hands
/// out) under which the group keeps its two-phase commit records: a participant's
/// *prepared* record of a cross-group transaction it is prepared to commit
/// (`G ‖ 0xF8 FFFFFFFC ‖ 0x01 ‖ txn`: the transaction's locks here and its staged
/// writes), and a coordinator group's *decision* for one (`… ‖ 0x02 ‖ txn`). Group data
/// like any other: written by log entries, carried by snapshots (docs/protocol.md,
/// "Two-phase commit").
pub const TWO_PHASE_OBJECT: [u8; 5] = [0xF8, 0xFF, 0xFF, 0xFF, 0xFC];
