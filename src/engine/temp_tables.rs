//! Temporary tables (`CREATE [LOCAL | GLOBAL] {TEMP | TEMPORARY} TABLE ... [ON COMMIT
//! {PRESERVE ROWS | DELETE ROWS | DROP}]`, `CREATE TEMP TABLE ... AS`, `SELECT ... INTO
//! TEMP`): ordinary tables marked temporary in the catalog (`RelationDesc::is_temporary`,
//! `pg_class.relpersistence 't'`) that the session which made them drops when it ends
//! (its connection closes, or `DISCARD ALL | TEMP`), and that the server drops at start
//! (left over by a crash). At the end of each transaction — a block's COMMIT or ROLLBACK,
//! or a statement outside a block — `ON COMMIT DELETE ROWS` empties the table and `ON
//! COMMIT DROP` drops it.
//!
//! Unlike Postgres they live in `public`, not in a session's own `pg_temp` schema: other
//! sessions see them, and a temporary table cannot take the name of an existing table
//! (42P07). No view or sink may read one (it would outlive the session: 0A000).

use crate::engine::Engine;
use crate::server::session::Session;
use crate::sql::parser::{DropKind, OnCommit};

impl Engine {
    /// Drop these tables if they are still there and temporary (a session ended).
    pub async fn drop_temp_tables(&self, names: &[String]) {
        for name in names {
            if !self
                .catalog
                .get(name)
                .is_some_and(|e| e.desc.is_temporary())
            {
                continue;
            }
            if let Err(e) = self
                .drop_relations(
                    std::slice::from_ref(name),
                    DropKind::Table,
                    true,
                    false,
                    None,
                    false,
                )
                .await
            {
                tracing::warn!(table = %name, error = %e, "could not drop a temporary table");
            }
        }
    }

    /// Temporary tables a crash left behind: dropped before anything reads the catalog.
    pub(crate) async fn drop_leftover_temp_tables(&self) {
        let names: Vec<String> = self
            .catalog
            .entries()
            .into_iter()
            .filter(|e| e.desc.is_temporary())
            .map(|e| e.desc.name.clone())
            .collect();
        if !names.is_empty() {
            tracing::info!(tables = ?names, "dropping temporary tables of sessions before the restart");
            self.drop_temp_tables(&names).await;
        }
    }

    /// A transaction ended (a block, or a statement outside one): the session's
    /// transaction-level advisory locks go, each of its temporary tables gets its ON COMMIT.
    pub async fn transaction_ended(&self, session: &mut Session) {
        crate::server::advisory_locks::transaction_ended(session.lock_holder);
        if session
            .temp_tables
            .iter()
            .all(|(_, o)| *o == OnCommit::PreserveRows)
        {
            return;
        }
        // a table dropped by the user is gone from the list
        session
            .temp_tables
            .retain(|(n, _)| self.catalog.get(n).is_some_and(|e| e.desc.is_temporary()));
        let to_empty: Vec<String> = session
            .temp_tables
            .iter()
            .filter(|(n, o)| {
                *o == OnCommit::DeleteRows
                    && self
                        .catalog
                        .get(n)
                        .and_then(|e| e.table.clone())
                        .is_some_and(|t| t.row_count() > 0)
            })
            .map(|(n, _)| n.clone())
            .collect();
        if !to_empty.is_empty()
            && let Err(e) = self.truncate(session, &to_empty, false, false, None).await
        {
            tracing::warn!(tables = ?to_empty, error = %e, "could not empty temporary tables at commit");
        }
        let to_drop: Vec<String> = session
            .temp_tables
            .iter()
            .filter(|(_, o)| *o == OnCommit::Drop)
            .map(|(n, _)| n.clone())
            .collect();
        session.temp_tables.retain(|(_, o)| *o != OnCommit::Drop);
        self.drop_temp_tables(&to_drop).await;
    }
}
