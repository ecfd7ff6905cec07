//! Arrow IPC encoding of batches for the store: the on-disk format of table changelogs and
//! snapshots. IPC is Arrow's own stable format, so stored data survives upgrades of arrow.

use std::io::Cursor;

use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;
use datafusion::arrow::record_batch::RecordBatch;

use crate::error::{Result, WeirError};

pub fn encode_batch(batch: &RecordBatch) -> Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(batch.get_array_memory_size() + 512);
    {
        let mut w = StreamWriter::try_new(&mut buf, &batch.schema())?;
        w.write(batch)?;
        w.finish()?;
    }
    Ok(buf)
}

pub fn decode_batches(bytes: &[u8]) -> Result<Vec<RecordBatch>> {
    let reader = StreamReader::try_new(Cursor::new(bytes), None)
        .map_err(|e| WeirError::internal(format!("corrupt stored batch: {e}")))?;
    reader
        .map(|b| b.map_err(|e| WeirError::internal(format!("corrupt stored batch: {e}"))))
        .collect()
}
