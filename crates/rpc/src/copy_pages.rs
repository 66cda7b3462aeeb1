//! A page of a move's copy on the wire (`Admin.ExportPage`): every stored version of
//! each row, tombstones included.

use megastore_placement::FinalCopyRefused;
use megastore_rowstore::{ExportedPage, StoredRow, StoredVersion};

use crate::WireError;
use crate::pb::admin as pb;

/// The status detail naming why a source refuses a final copy: what the operator core
/// needs ([`FinalCopyRefused`]), passed on by the target unchanged.
fn refusal_detail(why: FinalCopyRefused) -> &'static [u8] {
    match why {
        FinalCopyRefused::NotFrozen => b"megastore.final-copy-refused.not-frozen",
        FinalCopyRefused::StoreLost => b"megastore.final-copy-refused.store-lost",
    }
}

/// A source's refusal of a final copy, as `Admin.ExportPage` (and the target's
/// `Admin.CopyRange`, passing it on) answers it: FAILED_PRECONDITION, with the reason
/// in its details.
pub fn final_copy_refused_status(why: FinalCopyRefused) -> tonic::Status {
    tonic::Status::with_details(
        tonic::Code::FailedPrecondition,
        format!("final copy refused: {why}"),
        refusal_detail(why).to_vec().into(),
    )
}

/// Why a final copy was refused, if `status` says so ([`final_copy_refused_status`]).
pub fn final_copy_refusal(status: &tonic::Status) -> Option<FinalCopyRefused> {
    if status.code() != tonic::Code::FailedPrecondition {
        return None;
    }
    [FinalCopyRefused::NotFrozen, FinalCopyRefused::StoreLost]
        .into_iter()
        .find(|why| status.details() == refusal_detail(*why))
}

/// Pages of a copy's spans as the source answers them (`Admin.ExportPage`: the first
/// span's page, then those of the `following` spans), and the tracking of changes they
/// were exported under (`None`: none).
pub fn exported_pages_to_wire(
    pages: Vec<ExportedPage>,
    token: Option<u64>,
) -> pb::ExportPageResponse {
    let mut pages = pages.into_iter().map(|page| pb::SpanPage {
        rows: page.rows.into_iter().map(row_to_wire).collect(),
        next: page.next,
    });
    let first = pages.next().unwrap_or_default();
    pb::ExportPageResponse {
        rows: first.rows,
        next: first.next,
        following: pages.collect(),
        token: token.unwrap_or(0),
    }
}

fn row_to_wire(row: StoredRow) -> pb::StoredRow {
    pb::StoredRow {
        key: row.key,
        versions: row
            .versions
            .into_iter()
            .map(|v| pb::StoredVersion {
                column: v.column,
                timestamp: v.timestamp,
                value: v.value,
            })
            .collect(),
    }
}

/// The pages as the target applies them, in order, and the token they came under. A
/// row without versions (every stored row has at least one) is malformed.
pub fn exported_pages_from_wire(
    answer: pb::ExportPageResponse,
) -> Result<(Vec<ExportedPage>, Option<u64>), WireError> {
    let token = (answer.token != 0).then_some(answer.token);
    let first = pb::SpanPage {
        rows: answer.rows,
        next: answer.next,
    };
    let pages = std::iter::once(first)
        .chain(answer.following)
        .enumerate()
        .map(|(p, page)| {
            let rows = page
                .rows
                .into_iter()
                .enumerate()
                .map(|(i, row)| row_from_wire(row, p, i))
                .collect::<Result<_, _>>()?;
            Ok(ExportedPage {
                rows,
                next: page.next,
            })
        })
        .collect::<Result<_, _>>()?;
    Ok((pages, token))
}

fn row_from_wire(row: pb::StoredRow, page: usize, i: usize) -> Result<StoredRow, WireError> {
    if row.versions.is_empty() {
        let field = if page == 0 {
            format!("ExportPageResponse.rows[{i}]")
        } else {
            format!("ExportPageResponse.following[{}].rows[{i}]", page - 1)
        };
        return Err(WireError::Invalid {
            field,
            why: "a stored row has at least one version",
        });
    }
    Ok(StoredRow {
        key: row.key,
        versions: row
            .versions
            .into_iter()
            .map(|v| StoredVersion {
                column: v.column,
                timestamp: v.timestamp,
                value: v.value,
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_survive_the_wire_and_an_empty_row_is_refused() {
        let page = ExportedPage {
            rows: vec![StoredRow {
                key: b"k".to_vec(),
                versions: vec![
                    StoredVersion {
                        column: b"c".to_vec(),
                        timestamp: 7,
                        value: Some(b"v".to_vec()),
                    },
                    StoredVersion {
                        column: b"c".to_vec(),
                        timestamp: 3,
                        value: None,
                    },
                ],
            }],
            next: Some(b"l".to_vec()),
        };
        let done = ExportedPage {
            rows: page.rows.clone(),
            next: None,
        };
        let wire = exported_pages_to_wire(vec![done.clone(), page.clone()], Some(9));
        let (back, token) = exported_pages_from_wire(wire).unwrap();
        assert_eq!(token, Some(9));
        assert_eq!(back.len(), 2);
        assert_eq!((&back[0].rows, &back[0].next), (&done.rows, &done.next));
        assert_eq!((&back[1].rows, &back[1].next), (&page.rows, &page.next));
        let untracked = exported_pages_to_wire(vec![page], None);
        assert_eq!(exported_pages_from_wire(untracked).unwrap().1, None);
        let empty_row = pb::StoredRow {
            key: b"k".to_vec(),
            versions: vec![],
        };
        let empty = pb::ExportPageResponse {
            rows: vec![empty_row.clone()],
            ..Default::default()
        };
        let error = exported_pages_from_wire(empty).unwrap_err().to_string();
        assert!(error.contains("rows[0]"), "{error}");
        let empty_later = pb::ExportPageResponse {
            following: vec![pb::SpanPage {
                rows: vec![empty_row],
                next: None,
            }],
            ..Default::default()
        };
        let error = exported_pages_from_wire(empty_later)
            .unwrap_err()
            .to_string();
        assert!(error.contains("following[0].rows[0]"), "{error}");
    }

    #[test]
    fn a_final_copy_refusal_keeps_its_reason_and_nothing_else_is_one() {
        for why in [FinalCopyRefused::NotFrozen, FinalCopyRefused::StoreLost] {
            let status = final_copy_refused_status(why);
            assert_eq!(final_copy_refusal(&status), Some(why));
            assert!(status.message().contains(&why.to_string()));
        }
        let other = tonic::Status::failed_precondition(FinalCopyRefused::NotFrozen.to_string());
        assert_eq!(final_copy_refusal(&other), None);
    }
}
