//! Every validation rule, with where it points and what it says.

use megastore_schema::compile;

const ROOT: &str = "CREATE TABLE R { required int64 id; required string name; repeated string tags; optional string note; required double score; } PRIMARY KEY(id), ENTITY GROUP ROOT;\n";

/// Compiles `CREATE SCHEMA S;` + ROOT + `extra` and returns the rendered errors.
fn errors(extra: &str) -> Vec<String> {
    let text = format!("CREATE SCHEMA S;\n{ROOT}{extra}");
    match compile("t.msdl", &text, None) {
        Ok(_) => Vec::new(),
        Err(e) => e.diagnostics.iter().map(ToString::to_string).collect(),
    }
}

/// Where the `nth` (from 1) whole-word occurrence of `token` in `extra` lies in the
/// full schema text, as `line:col`.
fn position_of(extra: &str, token: &str, nth: usize) -> String {
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut seen = 0;
    for (line_index, line) in extra.lines().enumerate() {
        let chars: Vec<char> = line.chars().collect();
        let token_chars: Vec<char> = token.chars().collect();
        for col in 0..chars.len() {
            let fits = chars[col..].starts_with(&token_chars);
            let bounded = (col == 0 || !is_word(chars[col - 1]))
                && chars
                    .get(col + token_chars.len())
                    .is_none_or(|c| !is_word(*c));
            if fits && bounded {
                seen += 1;
                if seen == nth {
                    // Line 1 is CREATE SCHEMA, line 2 the root table.
                    return format!("{}:{}", line_index + 3, col + 1);
                }
            }
        }
    }
    panic!("{token:?} does not occur {nth} time(s) in {extra:?}");
}

/// Asserts exactly one error, pointing at the `nth` occurrence of `token` in `extra`,
/// containing `message`, with a hint.
#[track_caller]
fn assert_error(extra: &str, (token, nth): (&str, usize), message: &str) {
    let found = errors(extra);
    assert_eq!(
        found.len(),
        1,
        "expected one error for {extra:?}, got {found:#?}"
    );
    let expected_start = format!("t.msdl:{}: error: ", position_of(extra, token, nth));
    assert!(
        found[0].starts_with(&expected_start),
        "wanted the error at {token:?} #{nth} ({expected_start}), got {}",
        found[0]
    );
    assert!(
        found[0].contains(message),
        "message: wanted {message:?} in {}",
        found[0]
    );
    assert!(
        found[0].contains("\n  hint: ") || !needs_hint(message),
        "no hint: {}",
        found[0]
    );
}

fn needs_hint(message: &str) -> bool {
    !message.contains("appears twice")
        && !message.contains("given twice")
        && !message.contains("duplicate property")
}

const CHILD_HEAD: &str = "CREATE TABLE C { required int64 id; required int64 cid; repeated string tags; required string name; }";

#[test]
fn the_base_schema_is_valid() {
    assert_eq!(errors(""), Vec::<String>::new());
    let child = format!("{CHILD_HEAD} PRIMARY KEY(id, cid), ENTITY GROUP KEY(id) REFERENCES R;");
    assert_eq!(errors(&child), Vec::<String>::new());
}

#[test]
fn unknown_names() {
    assert_error(
        "CREATE TABLE C { required int64 id; } PRIMARY KEY(id, nope), ENTITY GROUP ROOT;",
        ("nope", 1),
        "unknown column `nope` in the PRIMARY KEY of `C`",
    );
    assert_error(
        "CREATE LOCAL INDEX I ON Nope(id);",
        ("Nope", 1),
        "unknown table `Nope` in LOCAL INDEX `I`",
    );
    assert_error(
        "CREATE TABLE C { required int64 id; } PRIMARY KEY(id), ENTITY GROUP KEY(id) REFERENCES Nope;",
        ("Nope", 1),
        "unknown table `Nope` in REFERENCES of `C`",
    );
    assert_error(
        "CREATE TABLE C { required int4 id; } PRIMARY KEY(id), ENTITY GROUP ROOT;",
        ("int4", 1),
        "unknown type `int4`",
    );
    assert_error(
        "CREATE GLOBAL INDEX I ON R(name) STORING (nope);",
        ("nope", 1),
        "unknown column `nope` in STORING of GLOBAL INDEX `I`",
    );
}

#[test]
fn duplicate_names() {
    assert_error(
        "CREATE TABLE R { required int64 id; } PRIMARY KEY(id), ENTITY GROUP ROOT;",
        ("R", 1),
        "duplicate name `R`: already declared at 2:14",
    );
    assert_error(
        "CREATE GLOBAL INDEX R ON R(name);",
        ("R", 1),
        "duplicate name `R`",
    );
    assert_error(
        "CREATE TABLE C { required int64 id; required string id; } PRIMARY KEY(id), ENTITY GROUP ROOT;",
        ("id", 2),
        "duplicate property `id` in table `C`",
    );
    assert_error(
        "CREATE TABLE C { required int64 id; } PRIMARY KEY(id, id), ENTITY GROUP ROOT;",
        ("id", 3),
        "column `id` appears twice in the PRIMARY KEY",
    );
    assert_error(
        "CREATE TABLE C { required int64 id; } PRIMARY KEY(id), ENTITY GROUP ROOT, ENTITY GROUP ROOT;",
        ("ENTITY", 2),
        "ENTITY GROUP ROOT given twice",
    );
    assert_error("CREATE SCHEMA T;", ("T", 1), "second CREATE SCHEMA `T`");
}

#[test]
fn child_group_keys() {
    let not_prefix =
        format!("{CHILD_HEAD} PRIMARY KEY(cid, id), ENTITY GROUP KEY(id) REFERENCES R;");
    assert_error(
        &not_prefix,
        ("ENTITY", 1),
        "ENTITY GROUP KEY(id) of `C` is not a prefix of its PRIMARY KEY(cid, id)",
    );
    let not_root = format!(
        "{CHILD_HEAD} PRIMARY KEY(id, cid), ENTITY GROUP KEY(id) REFERENCES R;\nCREATE TABLE D {{ required int64 id; }} PRIMARY KEY(id), ENTITY GROUP KEY(id) REFERENCES C;"
    );
    assert_error(
        &not_root,
        ("C", 2),
        "references `C`, which is not an ENTITY GROUP ROOT table",
    );
    let wrong_type = "CREATE TABLE C { required int32 id; required int64 cid; } PRIMARY KEY(id, cid), ENTITY GROUP KEY(id) REFERENCES R;";
    assert_error(wrong_type, ("id", 3), "`C.id` is int32 but `R.id` is int64");
    let too_long =
        format!("{CHILD_HEAD} PRIMARY KEY(id, cid), ENTITY GROUP KEY(id, cid) REFERENCES R;");
    assert_error(
        &too_long,
        ("ENTITY", 1),
        "ENTITY GROUP KEY of `C` has 2 column(s) but `R`'s key has 1",
    );
    let no_group = "CREATE TABLE C { required int64 id; } PRIMARY KEY(id);";
    assert_error(
        no_group,
        ("C", 1),
        "table `C` does not say which entity group it belongs to",
    );
    let both = "CREATE TABLE C { required int64 id; } PRIMARY KEY(id), ENTITY GROUP ROOT, ENTITY GROUP KEY(id) REFERENCES R;";
    assert_error(
        both,
        ("ENTITY", 2),
        "`C` is both ENTITY GROUP ROOT and a child",
    );
}

#[test]
fn in_table() {
    let cycle = "CREATE TABLE A { required int64 id; required int64 a; } PRIMARY KEY(id, a), IN TABLE B, ENTITY GROUP KEY(id) REFERENCES R;\n\
                 CREATE TABLE B { required int64 id; required int64 b; } PRIMARY KEY(id, b), IN TABLE A, ENTITY GROUP KEY(id) REFERENCES R;";
    assert_error(cycle, ("IN", 1), "IN TABLE cycle: A → B → A");
    let self_cycle = "CREATE TABLE A { required int64 id; required int64 a; } PRIMARY KEY(id, a), IN TABLE A, ENTITY GROUP KEY(id) REFERENCES R;";
    assert_error(self_cycle, ("IN", 1), "IN TABLE cycle: A → A");
    let on_root =
        "CREATE TABLE Q { required int64 id; } PRIMARY KEY(id), ENTITY GROUP ROOT, IN TABLE R;";
    assert_error(on_root, ("IN", 1), "IN TABLE on root table `Q`");
    let other_group = "CREATE TABLE Q { required int64 id; } PRIMARY KEY(id), ENTITY GROUP ROOT;\n\
                       CREATE TABLE C { required int64 id; required int64 c; } PRIMARY KEY(id, c), IN TABLE Q, ENTITY GROUP KEY(id) REFERENCES R;";
    assert_error(
        other_group,
        ("Q", 2),
        "IN TABLE `Q` of `C` is not in `R`'s entity groups",
    );
    let parent_key = format!(
        "{CHILD_HEAD} PRIMARY KEY(id, cid), ENTITY GROUP KEY(id) REFERENCES R;\n\
         CREATE TABLE D {{ required int64 id; required string d; }} PRIMARY KEY(id, d), IN TABLE C, ENTITY GROUP KEY(id) REFERENCES R;"
    );
    assert_error(
        &parent_key,
        ("C", 2),
        "the PRIMARY KEY of `D` does not start with the key of its parent `C`",
    );
}

#[test]
fn primary_key_columns() {
    assert_error(
        "CREATE TABLE C { repeated int64 id; } PRIMARY KEY(id), ENTITY GROUP ROOT;",
        ("id", 2),
        "repeated column `id` in the PRIMARY KEY of `C`",
    );
    assert_error(
        "CREATE TABLE C { optional int64 id; } PRIMARY KEY(id), ENTITY GROUP ROOT;",
        ("id", 2),
        "optional column `id` in the PRIMARY KEY",
    );
    assert_error(
        "CREATE TABLE C { required float id; } PRIMARY KEY(id), ENTITY GROUP ROOT;",
        ("id", 2),
        "column `id` of type float cannot be a key",
    );
}

#[test]
fn scatter() {
    let child =
        format!("{CHILD_HEAD} PRIMARY KEY(id, cid), ENTITY GROUP KEY(id) REFERENCES R, SCATTER;");
    assert_error(&child, ("SCATTER", 1), "SCATTER on child table `C`");
    assert_eq!(
        errors(
            "CREATE TABLE Q { required int64 id; } PRIMARY KEY(id), ENTITY GROUP ROOT, SCATTER;"
        ),
        Vec::<String>::new()
    );
}

#[test]
fn indexes() {
    let child = format!("{CHILD_HEAD} PRIMARY KEY(id, cid), ENTITY GROUP KEY(id) REFERENCES R;\n");
    assert_error(
        &format!("{child}CREATE LOCAL INDEX I ON C(name, id);"),
        ("name", 2),
        "LOCAL INDEX `I` must start with the entity group key (id)",
    );
    assert_error(
        &format!("{child}CREATE INLINE INDEX I ON C(cid, id);"),
        ("cid", 3),
        "INLINE INDEX `I` must start with the key of the parent `R` (id)",
    );
    assert_error(
        &format!("{child}CREATE INLINE INDEX I ON R(id);"),
        ("R", 2),
        "INLINE INDEX `I` is on root table `R`",
    );
    assert_error(
        "CREATE GLOBAL INDEX I ON R(name) STORING (id);",
        ("id", 1),
        "STORING key column `id`",
    );
    assert_error(
        "CREATE GLOBAL INDEX I ON R(name) STORING (name);",
        ("name", 2),
        "STORING indexed column `name`",
    );
    assert_error(
        "CREATE GLOBAL INDEX I ON R(note) STORING (score, score);",
        ("score", 2),
        "column `score` appears twice in STORING",
    );
    assert_error(
        &format!("{child}CREATE LOCAL INDEX I ON C(id, tags, cid, tags);"),
        ("tags", 3),
        "column `tags` appears twice",
    );
    let two_repeated = "CREATE TABLE Q { required int64 id; repeated string a; repeated string b; } PRIMARY KEY(id), ENTITY GROUP ROOT;\nCREATE GLOBAL INDEX I ON Q(a, b);";
    assert_error(
        two_repeated,
        ("b", 2),
        "GLOBAL INDEX `I` has more than one repeated column",
    );
    // Floats may be indexed, and an index on a repeated column is a repeated index.
    assert_eq!(
        errors("CREATE GLOBAL INDEX I ON R(score, tags);"),
        Vec::<String>::new()
    );
}

#[test]
fn syntax_errors_point_at_the_token_and_every_statement_is_checked() {
    let found = errors(
        "CREATE TABLE C { required int64 id } PRIMARY KEY(id), ENTITY GROUP ROOT;\nCREATE INDEX I ON R(name);\nCREATE TABLE D { required int64 id; } PRIMARY KEY(id), ENTITY GROUP ROT;",
    );
    assert_eq!(found.len(), 3, "{found:#?}");
    assert!(
        found[0].starts_with("t.msdl:3:36: error: expected `;`, found `}`"),
        "{}",
        found[0]
    );
    assert!(found[1].starts_with("t.msdl:4:8: error: expected `SCHEMA`, `TABLE`, `LOCAL`, `GLOBAL` or `INLINE` after CREATE"), "{}", found[1]);
    assert!(
        found[2].starts_with(
            "t.msdl:5:69: error: expected `ROOT` or `KEY` after ENTITY GROUP, found `ROT`"
        ),
        "{}",
        found[2]
    );
    let missing_schema = compile("t.msdl", ROOT, None).unwrap_err();
    assert!(
        missing_schema
            .to_string()
            .starts_with("t.msdl:1:1: error: missing CREATE SCHEMA")
    );
    let strange = compile("t.msdl", "CREATE SCHEMA S; \"x\"", None).unwrap_err();
    assert!(
        strange
            .to_string()
            .contains("1:18: error: unexpected character '\"'"),
        "{strange}"
    );
}

/// After a syntax error the statements that parsed are still checked: every
/// independent error is reported, the syntax errors (root causes) first; a follow-on
/// of a broken statement (an index on the table whose statement broke) is not.
#[test]
fn errors_after_a_syntax_error_are_reported_without_their_follow_ons() {
    let found = errors(
        "CREATE TABLE Broken { required int64 id;; } PRIMARY KEY(id), ENTITY GROUP ROOT;
CREATE GLOBAL INDEX OnBroken ON Broken(id);
CREATE TABLE C { required int64 id; required int64 c; } PRIMARY KEY(id, c), IN TABLE Rr, ENTITY GROUP KEY(id) REFERENCES R;
",
    );
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(
        found[0].contains("found `;`"),
        "the syntax error first: {found:#?}"
    );
    assert!(
        found[1].contains("unknown table `Rr` in IN TABLE of `C`"),
        "{found:#?}"
    );
    assert!(!found.iter().any(|e| e.contains("`Broken`")), "{found:#?}");
    // A statement that broke before its name could be anything: only syntax errors.
    let found = errors(
        "CREATE TABBLE X { required int64 id; } PRIMARY KEY(id), ENTITY GROUP ROOT;\nCREATE GLOBAL INDEX I ON X(id);\n",
    );
    assert_eq!(found.len(), 1, "{found:#?}");
}
