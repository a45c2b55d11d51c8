//! Picking a tool store backend from configuration. This is the one place that knows both
//! backends, so the trait module ([`crate::tools`]) never depends on its implementations.

use std::sync::Arc;

use crate::tools::ToolStore;
use crate::{PostgresToolStore, SqliteToolStore, Store, StoreError};

/// Open the tool store named by `spec`: a `postgres://` or `postgresql://` URL is a Postgres
/// database (schema created or brought up to date); anything else means SQLite, on `sqlite` when
/// given, else on the file `spec` names (`:memory:` for one in memory).
pub async fn open_tool_store(
    spec: &str,
    sqlite: Option<Arc<Store>>,
) -> Result<Arc<dyn ToolStore>, StoreError> {
    if spec.starts_with("postgres://") || spec.starts_with("postgresql://") {
        return Ok(Arc::new(PostgresToolStore::connect(spec).await?));
    }
    let store = match sqlite {
        Some(store) => store,
        None => {
            let spec = spec.to_owned();
            let opened = tokio::task::spawn_blocking(move || Store::open_path(&spec)).await;
            Arc::new(opened.map_err(|e| StoreError::Task(e.to_string()))??)
        }
    };
    Ok(Arc::new(SqliteToolStore::new(store)))
}
