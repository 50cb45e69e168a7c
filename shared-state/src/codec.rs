//! How the durable and networked backends turn values into bytes: CBOR (RFC 8949, ciborium).
//! The durable module's documentation says why CBOR.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::StoreError;

/// Decodes the value stored at `key`.
pub(crate) fn decode<T: DeserializeOwned>(key: &str, bytes: &[u8]) -> Result<T, StoreError> {
    ciborium::from_reader(bytes).map_err(|e| StoreError::Corrupt {
        key: key.to_owned(),
        reason: e.to_string(),
    })
}

/// Encodes `value` for storage at `key`.
pub(crate) fn encode<T: Serialize>(key: &str, value: &T) -> Result<Vec<u8>, StoreError> {
    let mut bytes = Vec::new();
    ciborium::into_writer(value, &mut bytes).map_err(|e| StoreError::Unencodable {
        key: key.to_owned(),
        reason: e.to_string(),
    })?;
    Ok(bytes)
}
