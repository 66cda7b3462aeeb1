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

/// A page as the source answers it.
pub fn exported_page_to_wire(page: ExportedPage) -> pb::ExportPageResponse {
    pb::ExportPageResponse {
        rows: page
            .rows
            .into_iter()
            .map(|row| pb::StoredRow {
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
            })
            .collect(),
        next: page.next,
    }
}

/// A page as the target applies it. A row without versions (every stored row has at
/// least one) is malformed.
pub fn exported_page_from_wire(page: pb::ExportPageResponse) -> Result<ExportedPage, WireError> {
    let rows = page
        .rows
        .into_iter()
        .enumerate()
        .map(|(i, row)| {
            if row.versions.is_empty() {
                return Err(WireError::Invalid {
                    field: format!("ExportPageResponse.rows[{i}]"),
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
        })
        .collect::<Result<_, _>>()?;
    Ok(ExportedPage {
        rows,
        next: page.next,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_survives_the_wire_and_an_empty_row_is_refused() {
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
        let back = exported_page_from_wire(exported_page_to_wire(page.clone())).unwrap();
        assert_eq!(back.rows, page.rows);
        assert_eq!(back.next, page.next);
        let empty = pb::ExportPageResponse {
            rows: vec![pb::StoredRow {
                key: b"k".to_vec(),
                versions: vec![],
            }],
            next: None,
        };
        let error = exported_page_from_wire(empty).unwrap_err().to_string();
        assert!(error.contains("rows[0]"), "{error}");
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
