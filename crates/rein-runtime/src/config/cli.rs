//! What the command line sets over the config file's text, before it is validated (so the
//! rules about listening hold for the address actually served): `rein serve --listen` and
//! `--port` over `server.listen`, and the variable the first client key is read from, for the
//! `curl` line `rein serve` prints.

use std::net::SocketAddr;

/// What the command line says about the address to listen on.
#[derive(Debug, Clone, Copy)]
pub enum Listen {
    Addr(SocketAddr),
    Port(u16),
}

/// The config text with `server.listen` replaced as the command line says. Text that is not a
/// TOML table (or whose `server` or `server.listen` is malformed) is returned as it is, so that
/// validation names the problem by its key.
pub fn with_listen(text: &str, listen: Listen) -> String {
    let Ok(mut table) = text.parse::<toml::Table>() else { return text.to_string() };
    let server = table.entry("server").or_insert_with(|| toml::Value::Table(toml::Table::new()));
    let Some(server) = server.as_table_mut() else { return text.to_string() };
    let addr = match listen {
        Listen::Addr(addr) => addr,
        Listen::Port(port) => {
            let current = match server.get("listen") {
                Some(value) => value.as_str().map(str::to_string),
                None => Some(super::raw::RawServer::default().listen),
            };
            let Some(mut addr) = current.and_then(|text| text.parse::<SocketAddr>().ok()) else {
                return text.to_string();
            };
            addr.set_port(port);
            addr
        }
    };
    server.insert("listen".to_string(), toml::Value::String(addr.to_string()));
    toml::to_string(&table).unwrap_or_else(|_| text.to_string())
}

/// The environment variable holding the first client key, when the config requires keys.
pub fn client_key_env(text: &str) -> Option<String> {
    let table = text.parse::<toml::Table>().ok()?;
    let names = table.get("server")?.get("client_keys_env")?.as_array()?;
    names.first()?.as_str().map(str::to_string)
}
