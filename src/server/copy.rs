//! COPY's text and CSV formats: reading `COPY table FROM STDIN` data into Arrow batches of
//! the table's types, and writing result batches as COPY lines.
//!
//! Reading is incremental: each CopyData chunk is split into complete records (a CSV record
//! may span lines inside quotes), collected as text columns and cast to the table's types
//! every [`CHUNK_ROWS`] rows, so the raw text is not held twice. The whole COPY is one
//! change to the table (all rows or none). NULL is the format's null string (`\N` in text,
//! an unquoted empty field in CSV); a quoted empty CSV field is an empty string.
//!
//! Writing reuses the wire encoder's text output for every value (so values print as in
//! query results) and escapes it for the format.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use datafusion::arrow::array::{
    ArrayRef, BinaryBuilder, StringArray, StringBuilder, new_null_array,
};
use datafusion::arrow::compute::{CastOptions, cast_with_options};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use pgwire::api::results::FieldFormat;

use crate::catalog::ColumnDesc;
use crate::error::{Result, WeirError, sqlstate};
use crate::server::encode::{ColumnPlan, encode_batch, pg_type_of};
use crate::sql::client_stmts::{CopyFormat, CopyOptions};
use crate::sql::types::SqlType;
use crate::state::table::TableStore;

/// Rows collected as text before they are cast to the table's types.
pub const CHUNK_ROWS: usize = 8192;

/// A `COPY table FROM STDIN` in progress. Rows are applied in chunks as they arrive (see
/// `Engine::copy_in_apply`), so a COPY larger than memory streams into the table; one that
/// fails undoes the chunks it applied.
pub struct CopyIn {
    pub table: Arc<TableStore>,
    pub table_name: String,
    pub schema: SchemaRef,
    pub columns: Vec<ColumnDesc>,
    /// Table column index of each field in the data.
    pub targets: Vec<usize>,
    /// The columns not listed that have a DEFAULT: filled after the rows are read
    /// (`Engine::copy_defaults`), so not checked for NULLs here.
    pub defaulted: Vec<usize>,
    pub options: CopyOptions,
    /// Bytes received but not yet parsed (an incomplete last record).
    pending: Vec<u8>,
    /// Text of the current chunk, one builder per data field.
    text: Vec<StringBuilder>,
    /// Input line of each row in the chunk (for error messages).
    lines: Vec<usize>,
    line: usize,
    header_skipped: bool,
    /// Per data field: FORCE_NULL / FORCE_NOT_NULL name its column.
    force_null: Vec<bool>,
    force_not_null: Vec<bool>,
    /// `\.` seen: the rest is ignored.
    ended: bool,
    /// Rows cast to the table's types, not applied yet.
    pub batches: Vec<RecordBatch>,
    /// Bytes of `batches`.
    pub batch_bytes: usize,
    /// Rows read (applied or not).
    pub rows: usize,
    /// The table's writer lock, held from the first chunk applied to the end of the COPY.
    pub writer: Option<Option<crate::engine::table_locks::WriterLock>>,
    /// The session's undo log length when the COPY began: a COPY that fails outside a
    /// transaction block undoes the chunks it applied back to here.
    pub undo_mark: usize,
    /// Keyed and multiset tables: the log position of the first chunk applied.
    pub first: Option<u64>,
    /// Append-only tables: the id of the chunks staged so far.
    pub staged: Option<u64>,
    /// Append-only tables: the chunk being written to the store while the next one is
    /// read (one at a time, in order); its result is awaited before the next chunk, the
    /// publish or the discard.
    pub staging: Option<tokio::task::JoinHandle<Result<usize>>>,
    /// The first error in the data: later data is ignored and the COPY fails at CopyDone
    /// (the client keeps sending until then).
    pub error: Option<WeirError>,
    /// The session's TimeZone: a `timestamptz` written without a zone is a wall-clock
    /// time there.
    pub zone: crate::sql::time_zone::Zone,
}

impl CopyIn {
    pub fn new(
        table: Arc<TableStore>,
        table_name: String,
        columns: Vec<ColumnDesc>,
        schema: SchemaRef,
        targets: Vec<usize>,
        options: CopyOptions,
        undo_mark: usize,
    ) -> Result<CopyIn> {
        for &t in &targets {
            if let SqlType::Array(e) = &columns[t].ty
                && matches!(e.as_ref(), SqlType::Array(_))
            {
                return Err(WeirError::not_supported(format!(
                    "COPY into multi-dimensional array column \"{}\" is not supported",
                    columns[t].name
                )));
            }
        }
        // the FORCE options name columns the COPY reads
        let forced = |what: &str, names: &[String]| -> Result<Vec<bool>> {
            for n in names {
                if !columns.iter().any(|c| &c.name == n) {
                    return Err(WeirError::new(
                        crate::error::sqlstate::UNDEFINED_COLUMN,
                        format!("column \"{n}\" of relation \"{table_name}\" does not exist"),
                    ));
                }
                if !targets.iter().any(|&t| &columns[t].name == n) {
                    return Err(WeirError::new(
                        "42P10",
                        format!("{what} column \"{n}\" not referenced by COPY"),
                    ));
                }
            }
            Ok(targets
                .iter()
                .map(|&t| names.contains(&columns[t].name))
                .collect())
        };
        let force_null = forced("FORCE_NULL", &options.force_null)?;
        let force_not_null = forced("FORCE_NOT_NULL", &options.force_not_null)?;
        let text = targets.iter().map(|_| StringBuilder::new()).collect();
        Ok(CopyIn {
            table,
            table_name,
            schema,
            columns,
            targets,
            defaulted: Vec::new(),
            options,
            pending: Vec::new(),
            text,
            lines: Vec::new(),
            line: 0,
            header_skipped: false,
            force_null,
            force_not_null,
            ended: false,
            batches: Vec::new(),
            batch_bytes: 0,
            rows: 0,
            writer: None,
            undo_mark,
            first: None,
            staged: None,
            staging: None,
            error: None,
            zone: crate::sql::time_zone::Zone::utc(),
        })
    }

    fn context(&self, line: usize) -> String {
        format!("COPY {}, line {line}", self.table_name)
    }

    /// Take a CopyData chunk: parse its complete records. Records are parsed in place; only
    /// one that spans chunks is put together in `pending` first.
    pub fn feed(&mut self, data: &[u8]) -> Result<()> {
        let mut data = data;
        // finish the record the last chunk left open, a line at a time
        while !self.pending.is_empty() && !self.ended {
            let Some(nl) = data.iter().position(|&b| b == b'\n') else {
                self.pending.extend_from_slice(data);
                return Ok(());
            };
            self.pending.extend_from_slice(&data[..=nl]);
            data = &data[nl + 1..];
            let pending = std::mem::take(&mut self.pending);
            let used = self.parse(&pending, false)?;
            self.pending = pending[used..].to_vec();
        }
        if self.ended {
            return Ok(());
        }
        let used = self.parse(data, false)?;
        self.pending.extend_from_slice(&data[used..]);
        Ok(())
    }

    /// CopyDone: parse what is left and cast the last chunk.
    pub fn finish(&mut self) -> Result<()> {
        let pending = std::mem::take(&mut self.pending);
        if !self.ended && !pending.is_empty() {
            let used = self.parse(&pending, true)?;
            debug_assert_eq!(used, pending.len());
        }
        self.cast_chunk()
    }

    /// Parse complete records from `buf`; returns how many bytes were used. With `last`,
    /// the final record needs no newline.
    fn parse(&mut self, buf: &[u8], last: bool) -> Result<usize> {
        let mut pos = 0;
        // one vector of fields for every record (no allocation per row)
        let mut fields: Vec<Field<'_>> = Vec::with_capacity(self.targets.len());
        while pos < buf.len() && !self.ended {
            let Some(next) = (match self.options.format {
                CopyFormat::Text => split_text(buf, pos, self.options.delimiter, last, &mut fields),
                CopyFormat::Csv => split_csv(buf, pos, &self.options, last, &mut fields),
            }) else {
                break;
            };
            let raw_line = &buf[pos..next];
            pos = next;
            self.line += 1;
            if trim_eol(raw_line) == b"\\." {
                self.ended = true;
                break;
            }
            if self.options.header && !self.header_skipped {
                self.header_skipped = true;
                if self.options.header_match {
                    self.match_header(std::mem::take(&mut fields), trim_eol(raw_line))?;
                }
                continue;
            }
            self.push_record(&mut fields)?;
        }
        Ok(pos)
    }

    /// `HEADER MATCH`: the header line names the COPY's columns, in order.
    fn match_header(&self, fields: Vec<Field<'_>>, line: &[u8]) -> Result<()> {
        let context = format!(
            "{}: \"{}\"",
            self.context(self.line),
            String::from_utf8_lossy(line)
        );
        if fields.len() != self.targets.len() {
            return Err(WeirError::new(
                "22P04",
                format!(
                    "wrong number of fields in header line: got {}, expected {}",
                    fields.len(),
                    self.targets.len()
                ),
            )
            .with_context(context));
        }
        for (k, f) in fields.into_iter().enumerate() {
            let got = match f {
                Field::Text(raw) => unescape_text(raw).into_owned(),
                Field::Csv { value, .. } => value.into_owned(),
            };
            let got = String::from_utf8_lossy(&got);
            let want = &self.columns[self.targets[k]].name;
            if got != want.as_str() {
                return Err(WeirError::new(
                    "22P04",
                    format!(
                        "column name mismatch in header line field {}: got \"{got}\", expected \"{want}\"",
                        k + 1
                    ),
                )
                .with_context(context));
            }
        }
        Ok(())
    }

    fn push_record(&mut self, fields: &mut Vec<Field<'_>>) -> Result<()> {
        if fields.len() > self.targets.len() {
            return Err(
                WeirError::new("22P04", "extra data after last expected column")
                    .with_context(self.context(self.line)),
            );
        }
        if fields.len() < self.targets.len() {
            let missing = &self.columns[self.targets[fields.len()]].name;
            return Err(
                WeirError::new("22P04", format!("missing data for column \"{missing}\""))
                    .with_context(self.context(self.line)),
            );
        }
        for (k, f) in fields.drain(..).enumerate() {
            let value = match f {
                Field::Text(raw) => {
                    if raw == self.options.null.as_bytes() {
                        None
                    } else {
                        Some(unescape_text(raw))
                    }
                }
                Field::Csv { value, quoted } => {
                    // FORCE_NOT_NULL: never NULL; FORCE_NULL: NULL even when quoted
                    let null_text = value == self.options.null.as_bytes();
                    if null_text && !self.force_not_null[k] && (!quoted || self.force_null[k]) {
                        None
                    } else {
                        Some(value)
                    }
                }
            };
            match value {
                None => self.text[k].append_null(),
                Some(v) => {
                    let s = std::str::from_utf8(&v).map_err(|_| {
                        WeirError::new("22021", "invalid byte sequence for encoding \"UTF8\"")
                            .with_context(self.context(self.line))
                    })?;
                    self.text[k].append_value(s);
                }
            }
        }
        self.lines.push(self.line);
        if self.lines.len() >= CHUNK_ROWS {
            self.cast_chunk()?;
        }
        Ok(())
    }

    /// Cast the collected text to the table's types and keep the batch.
    fn cast_chunk(&mut self) -> Result<()> {
        let n = self.lines.len();
        if n == 0 {
            return Ok(());
        }
        let mut cols: Vec<ArrayRef> = self
            .schema
            .fields()
            .iter()
            .map(|f| new_null_array(f.data_type(), n))
            .collect();
        for (k, &t) in self.targets.iter().enumerate() {
            let text = self.text[k].finish();
            let c = &self.columns[t];
            let target = self.schema.field(t).data_type().clone();
            cols[t] = cast_text(&text, &c.ty, &target, &self.zone).map_err(|b| {
                let (row, e) = *b;
                // Postgres' context names the value too: `COPY t, line 3, column c: "x"`
                let value = if datafusion::arrow::array::Array::is_valid(&text, row) {
                    format!(": \"{}\"", text.value(row))
                } else {
                    String::new()
                };
                // (after the value's own context, as Postgres stacks them)
                let copy = format!(
                    "{}, column {}{value}",
                    self.context(self.lines[row]),
                    c.name
                );
                let context = match &e.context {
                    Some(inner) => format!("{inner}\n{copy}"),
                    None => copy,
                };
                e.with_context(context)
            })?;
        }
        if let Some((row, e)) = crate::state::table::not_null_violation(
            &self.table_name,
            &self.schema,
            &cols,
            &self.defaulted,
        ) {
            return Err(e.with_context(self.context(self.lines[row])));
        }
        self.lines.clear();
        self.rows += n;
        let batch = RecordBatch::try_new(self.schema.clone(), cols)?;
        self.batch_bytes += batch.get_array_memory_size();
        self.batches.push(batch);
        Ok(())
    }
}

fn trim_eol(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// A field as read, borrowed from the input where it can be: text format fields are still
/// escaped; a CSV field is owned only when it held doubled quotes.
enum Field<'a> {
    Text(&'a [u8]),
    Csv {
        value: std::borrow::Cow<'a, [u8]>,
        quoted: bool,
    },
}

/// One text-format record starting at `pos`: its fields (into `fields`, emptied first) and
/// where the next record starts.
fn split_text<'a>(
    buf: &'a [u8],
    pos: usize,
    delim: u8,
    last: bool,
    fields: &mut Vec<Field<'a>>,
) -> Option<usize> {
    fields.clear();
    let end = match buf[pos..].iter().position(|&b| b == b'\n') {
        Some(i) => pos + i,
        None if last => buf.len(),
        None => return None,
    };
    let next = (end + 1).min(buf.len());
    let line = trim_eol(&buf[pos..end]);
    let mut start = 0;
    let mut i = 0;
    while i < line.len() {
        if line[i] == b'\\' {
            i += 2;
            continue;
        }
        if line[i] == delim {
            fields.push(Field::Text(&line[start..i]));
            start = i + 1;
        }
        i += 1;
    }
    fields.push(Field::Text(&line[start.min(line.len())..]));
    Some(next)
}

/// Undo the text format's backslash escapes.
fn unescape_text(raw: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    if !raw.contains(&b'\\') {
        return std::borrow::Cow::Borrowed(raw);
    }
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        if b != b'\\' || i + 1 >= raw.len() {
            out.push(b);
            i += 1;
            continue;
        }
        let c = raw[i + 1];
        i += 2;
        match c {
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(11),
            b'0'..=b'7' => {
                let mut v = (c - b'0') as u32;
                let mut k = 0;
                while k < 2 && i < raw.len() && (b'0'..=b'7').contains(&raw[i]) {
                    v = v * 8 + (raw[i] - b'0') as u32;
                    i += 1;
                    k += 1;
                }
                out.push(v as u8);
            }
            b'x' if i < raw.len() && raw[i].is_ascii_hexdigit() => {
                let mut v = 0u32;
                let mut k = 0;
                while k < 2 && i < raw.len() && raw[i].is_ascii_hexdigit() {
                    v = v * 16 + (raw[i] as char).to_digit(16).unwrap_or(0);
                    i += 1;
                    k += 1;
                }
                out.push(v as u8);
            }
            other => out.push(other),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// One CSV record starting at `pos` (quoted fields may hold newlines): its fields (into
/// `fields`, emptied first) and where the next record starts.
fn split_csv<'a>(
    buf: &'a [u8],
    pos: usize,
    o: &CopyOptions,
    last: bool,
    fields: &mut Vec<Field<'a>>,
) -> Option<usize> {
    simple_csv_record(buf, pos, o, fields).or_else(|| split_csv_general(buf, pos, o, last, fields))
}

/// The common CSV record, borrowed: every field either has no quote character at all or is
/// one quoted run without doubled quotes or escapes, and the record ends with a newline.
/// `None` sends the record to the general splitter.
fn simple_csv_record<'a>(
    buf: &'a [u8],
    pos: usize,
    o: &CopyOptions,
    fields: &mut Vec<Field<'a>>,
) -> Option<usize> {
    fields.clear();
    let mut i = pos;
    loop {
        let (value, quoted, end) = if buf.get(i) == Some(&o.quote) {
            let close = i + 1 + buf[i + 1..].iter().position(|&b| b == o.quote)?;
            let content = &buf[i + 1..close];
            if o.escape != o.quote && content.contains(&o.escape) {
                return None;
            }
            (content, true, close + 1)
        } else {
            let end = i + buf[i..]
                .iter()
                .position(|&b| b == o.delimiter || b == b'\n' || b == o.quote)?;
            if buf[end] == o.quote {
                return None;
            }
            (&buf[i..end], false, end)
        };
        match buf.get(end) {
            Some(&b) if b == o.delimiter => {
                fields.push(Field::Csv {
                    value: std::borrow::Cow::Borrowed(value),
                    quoted,
                });
                i = end + 1;
            }
            Some(b'\n') => {
                let value = if !quoted && value.last() == Some(&b'\r') {
                    &value[..value.len() - 1]
                } else {
                    value
                };
                fields.push(Field::Csv {
                    value: std::borrow::Cow::Borrowed(value),
                    quoted,
                });
                return Some(end + 1);
            }
            // CRLF after a closing quote, a doubled quote, text after a quote, or the end
            _ => return None,
        }
    }
}

/// Any CSV record: quoted fields with doubled quotes or escapes, newlines inside quotes.
fn split_csv_general<'a>(
    buf: &'a [u8],
    pos: usize,
    o: &CopyOptions,
    last: bool,
    fields: &mut Vec<Field<'a>>,
) -> Option<usize> {
    fields.clear();
    let mut value = Vec::new();
    let mut quoted = false;
    let mut in_quotes = false;
    let mut i = pos;
    while i < buf.len() {
        let b = buf[i];
        if in_quotes {
            if b == o.escape && o.escape != o.quote && buf.get(i + 1) == Some(&o.quote) {
                value.push(o.quote);
                i += 2;
                continue;
            }
            if b == o.quote {
                if o.escape == o.quote && buf.get(i + 1) == Some(&o.quote) {
                    value.push(o.quote);
                    i += 2;
                    continue;
                }
                if i + 1 == buf.len() && !last {
                    // a doubled quote may continue in the next chunk
                    return None;
                }
                in_quotes = false;
                i += 1;
                continue;
            }
            value.push(b);
            i += 1;
            continue;
        }
        if b == o.quote {
            in_quotes = true;
            quoted = true;
        } else if b == o.delimiter {
            fields.push(Field::Csv {
                value: std::mem::take(&mut value).into(),
                quoted,
            });
            quoted = false;
        } else if b == b'\n' {
            // CRLF line ends: the CR came after any closing quote
            if i > pos && buf[i - 1] == b'\r' {
                value.pop();
            }
            fields.push(Field::Csv {
                value: value.into(),
                quoted,
            });
            return Some(i + 1);
        } else {
            value.push(b);
        }
        i += 1;
    }
    if !last {
        return None;
    }
    if buf.last() == Some(&b'\r') && value.last() == Some(&b'\r') {
        value.pop();
    }
    fields.push(Field::Csv {
        value: value.into(),
        quoted,
    });
    Some(buf.len())
}

/// A value COPY could not read: the row (in the batch) and why.
type CastError = Box<(usize, WeirError)>;

/// Cast a text column to a column type, as Postgres reads input text. Errors name the row.
fn cast_text(
    text: &StringArray,
    ty: &SqlType,
    target: &DataType,
    zone: &crate::sql::time_zone::Zone,
) -> std::result::Result<ArrayRef, CastError> {
    let input_name = ty.input_name();
    let bad = |row: usize, v: &str| Box::new((row, crate::error::invalid_input(&input_name, v)));
    match ty {
        SqlType::Text | SqlType::Varchar(None) | SqlType::Name => {
            return cast_plain(&(Arc::new(text.clone()) as ArrayRef), target, text, &bad);
        }
        SqlType::Varchar(Some(n)) | SqlType::Bpchar(Some(n)) => {
            // character(n): trailing blanks do not count (and are not stored)
            let trimmed: StringArray = match ty {
                SqlType::Bpchar(_) => text
                    .iter()
                    .map(|v| v.map(|v| v.trim_end_matches(' ')))
                    .collect(),
                _ => text.clone(),
            };
            for (row, v) in trimmed.iter().enumerate() {
                if let Some(v) = v
                    && v.chars().count() > *n as usize
                {
                    return Err(Box::new((
                        row,
                        WeirError::new(
                            sqlstate::STRING_DATA_RIGHT_TRUNCATION,
                            format!("value too long for type {}", ty.display_name()),
                        ),
                    )));
                }
            }
            return cast_plain(&(Arc::new(trimmed) as ArrayRef), target, text, &bad);
        }
        SqlType::Jsonb | SqlType::Json => {
            // (checked as Postgres reads it: its words for what is wrong, and where)
            for (row, v) in text.iter().enumerate() {
                if let Some(v) = v
                    && let Err(e) = crate::sql::jsonb::check(v)
                {
                    return Err(Box::new((row, e)));
                }
            }
            return cast_plain(&(Arc::new(text.clone()) as ArrayRef), target, text, &bad);
        }
        SqlType::Bytea => {
            let mut b = BinaryBuilder::new();
            for (row, v) in text.iter().enumerate() {
                match v {
                    None => b.append_null(),
                    Some(v) => match crate::sql::bytea_codec::bytea_in(v) {
                        Ok(bytes) => b.append_value(bytes),
                        Err(_) => return Err(bad(row, v)),
                    },
                }
            }
            let a: ArrayRef = Arc::new(b.finish());
            return cast_plain(&a, target, text, &bad);
        }
        SqlType::Uuid => {
            // checked here to name the row; stored canonical by the table
            if let Some(row) = text
                .iter()
                .position(|v| v.is_some_and(|v| crate::sql::uuid::parse(v).is_none()))
            {
                return Err(bad(row, text.value(row)));
            }
            return cast_plain(&(Arc::new(text.clone()) as ArrayRef), target, text, &bad);
        }
        SqlType::Inet | SqlType::Cidr => {
            // (Postgres' words: `invalid cidr value` for bits right of the mask)
            for (row, v) in text.iter().enumerate() {
                if let Some(v) = v
                    && let Err(e) = crate::sql::inet::parse(v, *ty == SqlType::Cidr)
                {
                    return Err(Box::new((row, e)));
                }
            }
            return cast_plain(&(Arc::new(text.clone()) as ArrayRef), target, text, &bad);
        }
        SqlType::Array(elem) => {
            // `{a,"b c",NULL}`: the elements of all rows read as one column of the
            // element type (an element's error names its row)
            let DataType::List(field) = target else {
                return Err(Box::new((
                    0,
                    WeirError::internal(format!("array column as {target}")),
                )));
            };
            let mut items = StringBuilder::new();
            let mut item_row = Vec::new();
            let mut offsets = vec![0i32];
            let mut valid = Vec::new();
            for (row, v) in text.iter().enumerate() {
                if let Some(v) = v {
                    let elems = crate::sql::pg_text::parse_array_text(v)
                        .ok_or_else(|| (row, crate::sql::pg_text::malformed_array_literal(v)))?;
                    for e in elems {
                        items.append_option(e);
                        item_row.push(row);
                    }
                }
                let end = i32::try_from(item_row.len()).map_err(|_| {
                    (
                        row,
                        WeirError::internal("COPY chunk with over 2^31 array elements"),
                    )
                })?;
                offsets.push(end);
                valid.push(v.is_some());
            }
            let values =
                cast_text(&items.finish(), elem, field.data_type(), zone).map_err(|b| {
                    let (i, e) = *b;
                    Box::new((item_row.get(i).copied().unwrap_or(0), e))
                })?;
            let list = datafusion::arrow::array::ListArray::try_new(
                field.clone(),
                datafusion::arrow::buffer::OffsetBuffer::new(offsets.into()),
                values,
                Some(datafusion::arrow::buffer::NullBuffer::from(valid)),
            )
            .map_err(|e| Box::new((0, WeirError::from(e))))?;
            return Ok(Arc::new(list));
        }
        SqlType::Time(_) => {
            return crate::sql::datetime_in::time_in(&(Arc::new(text.clone()) as ArrayRef))
                .map_err(|row| bad(row, text.value(row)));
        }
        SqlType::Interval => {
            return crate::sql::interval_in::to_array(text)
                .map(|a| Arc::new(a) as ArrayRef)
                .map_err(|row| bad(row, text.value(row)));
        }
        SqlType::Timestamp(_) | SqlType::Date
            if let Some(read) = crate::sql::datetime_in::read_canonical(text, target) =>
        {
            // every value in the canonical form: read in one pass
            return Ok(read);
        }
        SqlType::TimestampTz(_) | SqlType::Timestamp(_) | SqlType::Date => {
            // Postgres prints a UTC offset as `+00`; the parser wants `+00:00`; and the
            // forms Postgres reads that arrow does not (`crate::sql::datetime_in`)
            let keep_zone = matches!(ty, SqlType::TimestampTz(_));
            let normalized: StringArray = text
                .iter()
                .map(|v| {
                    v.map(|v| {
                        let n = match ty {
                            SqlType::Date => crate::sql::datetime_in::normalize_date(v),
                            _ => crate::sql::datetime_in::normalize(v, keep_zone),
                        };
                        let v = n.as_deref().unwrap_or(v);
                        if matches!(ty, SqlType::Date) {
                            v.to_owned()
                        } else {
                            normalize_offset(v)
                        }
                    })
                })
                .collect();
            let parsed = cast_plain(&(Arc::new(normalized) as ArrayRef), target, text, &bad)?;
            let parsed = crate::sql::datetime_in::with_infinities(text, parsed);
            if keep_zone {
                return crate::sql::time_zone::read_in_zone(text, parsed, zone)
                    .map_err(|e| Box::new((0, WeirError::from(e))));
            }
            return Ok(parsed);
        }
        SqlType::Numeric(_) => {
            let plain = crate::sql::numeric::numeric_text_array(&trimmed(text))
                .map_err(|e| Box::new((0, WeirError::from(e))))?;
            return cast_plain(&plain, target, text, &bad);
        }
        SqlType::Float4 | SqlType::Float8 => {
            let parsed = cast_plain(&trimmed(text), target, text, &bad)?;
            // past the type's range: 22003, as Postgres (arrow reads infinity or 0)
            if let Some(bad_row) = crate::sql::pg_math::float_out_of_range(text, &parsed)
                .map_err(|e| Box::new((0, WeirError::from(e))))?
            {
                return Err(Box::new(bad_row));
            }
            return Ok(parsed);
        }
        _ => {}
    }
    cast_plain(&trimmed(text), target, text, &bad)
}

/// The column without the blanks around its values (Postgres reads ` 12 ` as a number);
/// the column itself, not a copy, when no value has any.
fn trimmed(text: &StringArray) -> ArrayRef {
    let blank = |b: &u8| b.is_ascii_whitespace();
    let any = text.iter().flatten().any(|v| {
        let b = v.as_bytes();
        b.first().is_some_and(blank) || b.last().is_some_and(blank)
    });
    match any {
        false => Arc::new(text.clone()),
        true => Arc::new(
            text.iter()
                .map(|v| v.map(|v| v.trim_matches(|c: char| c.is_ascii_whitespace())))
                .collect::<StringArray>(),
        ),
    }
}

fn normalize_offset(v: &str) -> String {
    let b = v.as_bytes();
    let n = b.len();
    // an offset follows a time (`10:00+02`); a date's own `-01` is not one
    if n > 3
        && v[..n - 3].contains(':')
        && (b[n - 3] == b'+' || b[n - 3] == b'-')
        && b[n - 2].is_ascii_digit()
        && b[n - 1].is_ascii_digit()
    {
        format!("{v}:00")
    } else {
        v.to_owned()
    }
}

fn cast_plain(
    a: &ArrayRef,
    target: &DataType,
    text: &StringArray,
    bad: &dyn Fn(usize, &str) -> CastError,
) -> std::result::Result<ArrayRef, CastError> {
    let opts = CastOptions {
        safe: true,
        ..Default::default()
    };
    let out = cast_with_options(a, target, &opts).map_err(|e| Box::new((0, WeirError::from(e))))?;
    if out.null_count() != a.null_count() {
        for row in 0..out.len() {
            if out.is_null(row) && a.is_valid(row) {
                // a number too large for its numeric(p, s): Postgres' "numeric field
                // overflow" (the strict cast says which), not invalid input
                if matches!(target, DataType::Decimal128(..)) {
                    let strict = CastOptions {
                        safe: false,
                        ..Default::default()
                    };
                    if let Err(e) = cast_with_options(&a.slice(row, 1), target, &strict) {
                        let e = WeirError::from(e);
                        if e.code == sqlstate::NUMERIC_VALUE_OUT_OF_RANGE {
                            return Err(Box::new((row, e)));
                        }
                    }
                }
                return Err(bad(row, text.value(row)));
            }
        }
    }
    Ok(out)
}

/// Writes result batches as COPY lines, one CopyData payload per row.
pub struct CopyWriter {
    plans: Vec<ColumnPlan>,
    options: CopyOptions,
    header: Option<Vec<String>>,
    /// Per column: FORCE_QUOTE names it.
    force_quote: Vec<bool>,
}

impl CopyWriter {
    pub fn new(
        schema: &SchemaRef,
        options: CopyOptions,
        zone: crate::sql::time_zone::Zone,
    ) -> CopyWriter {
        let plans = schema
            .fields()
            .iter()
            .map(|f| ColumnPlan {
                ty: pg_type_of(f),
                format: FieldFormat::Text,
                zone,
            })
            .collect();
        let header = options.header.then(|| {
            schema
                .fields()
                .iter()
                .map(|f| crate::catalog::rewrite::display_column_name(f.name()).to_owned())
                .collect()
        });
        let force_quote = schema
            .fields()
            .iter()
            .map(|f| {
                options.force_quote.as_ref().is_some_and(|c| {
                    c.includes(crate::catalog::rewrite::display_column_name(f.name()))
                })
            })
            .collect();
        CopyWriter {
            plans,
            options,
            header,
            force_quote,
        }
    }

    pub fn columns(&self) -> usize {
        self.plans.len()
    }

    /// The header line, the first time it is asked for (when HEADER was given).
    pub fn header(&mut self) -> Option<Bytes> {
        let names = self.header.take()?;
        let mut out = BytesMut::new();
        for (i, n) in names.iter().enumerate() {
            if i > 0 {
                out.put_u8(self.options.delimiter);
            }
            self.put_value(&mut out, n.as_bytes(), false);
        }
        out.put_u8(b'\n');
        Some(out.freeze())
    }

    /// One line per row.
    pub fn lines(&self, batch: &RecordBatch) -> Result<Vec<Bytes>> {
        let rows = encode_batch(batch, &self.plans)?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let mut line = BytesMut::with_capacity(row.data.len() + 8);
            let data = &row.data[..];
            let mut at = 0;
            for i in 0..self.plans.len() {
                if i > 0 {
                    line.put_u8(self.options.delimiter);
                }
                let len = i32::from_be_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]);
                at += 4;
                if len < 0 {
                    line.put_slice(self.options.null.as_bytes());
                    continue;
                }
                let v = &data[at..at + len as usize];
                at += len as usize;
                self.put_value(&mut line, v, self.force_quote[i]);
            }
            line.put_u8(b'\n');
            out.push(line.freeze());
        }
        Ok(out)
    }

    fn put_value(&self, out: &mut BytesMut, v: &[u8], force_quote: bool) {
        let o = &self.options;
        match o.format {
            CopyFormat::Text => {
                for &b in v {
                    match b {
                        b'\\' => out.put_slice(b"\\\\"),
                        b'\n' => out.put_slice(b"\\n"),
                        b'\r' => out.put_slice(b"\\r"),
                        b'\t' => out.put_slice(b"\\t"),
                        8 => out.put_slice(b"\\b"),
                        12 => out.put_slice(b"\\f"),
                        11 => out.put_slice(b"\\v"),
                        b if b == o.delimiter => {
                            out.put_u8(b'\\');
                            out.put_u8(b);
                        }
                        b => out.put_u8(b),
                    }
                }
            }
            CopyFormat::Csv => {
                let needs = force_quote
                    || v.is_empty() && o.null.is_empty()
                    || v == o.null.as_bytes()
                    || v.iter()
                        .any(|&b| b == o.delimiter || b == o.quote || b == b'\n' || b == b'\r')
                    || v.first().is_some_and(|b| b.is_ascii_whitespace())
                    || v.last().is_some_and(|b| b.is_ascii_whitespace());
                if !needs {
                    out.put_slice(v);
                    return;
                }
                out.put_u8(o.quote);
                for &b in v {
                    if b == o.quote || b == o.escape {
                        out.put_u8(o.escape);
                    }
                    out.put_u8(b);
                }
                out.put_u8(o.quote);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fields a splitter reads, in a vector of their own, and where the next record
    /// starts.
    fn collect<'a>(
        split: impl FnOnce(&mut Vec<Field<'a>>) -> Option<usize>,
    ) -> Option<(Vec<Field<'a>>, usize)> {
        let mut f = Vec::new();
        split(&mut f).map(|n| (f, n))
    }

    use crate::sql::client_stmts::CopyFormat;

    fn opts(format: CopyFormat) -> CopyOptions {
        crate::sql::parser::parse(match format {
            CopyFormat::Text => "COPY t FROM STDIN",
            CopyFormat::Csv => "COPY t FROM STDIN (FORMAT csv)",
        })
        .ok()
        .and_then(|mut v| match v.remove(0).stmt {
            crate::sql::parser::Statement::Copy(c) => match *c {
                crate::sql::client_stmts::Copy::From { options, .. } => Some(options),
                _ => None,
            },
            _ => None,
        })
        .expect("options")
    }

    fn texts(fields: Vec<Field>) -> Vec<Option<String>> {
        fields
            .into_iter()
            .map(|f| match f {
                Field::Text(raw) if raw == b"\\N" => None,
                Field::Text(raw) => {
                    Some(String::from_utf8(unescape_text(raw).into_owned()).unwrap())
                }
                Field::Csv { value, quoted } if value.is_empty() && !quoted => None,
                Field::Csv { value, .. } => Some(String::from_utf8(value.into_owned()).unwrap()),
            })
            .collect()
    }

    #[test]
    fn text_records_unescape() {
        let buf = b"1\ta\\tb\t\\N\n2\tx\\\\y\\n\t\\101\npartial";
        let (f, next) = collect(|f| split_text(buf, 0, b'\t', false, f)).unwrap();
        assert_eq!(texts(f), vec![Some("1".into()), Some("a\tb".into()), None]);
        let (f, next) = collect(|f| split_text(buf, next, b'\t', false, f)).unwrap();
        assert_eq!(
            texts(f),
            vec![Some("2".into()), Some("x\\y\n".into()), Some("A".into())]
        );
        assert!(collect(|f| split_text(buf, next, b'\t', false, f)).is_none());
        let (f, end) = collect(|f| split_text(buf, next, b'\t', true, f)).unwrap();
        assert_eq!(texts(f), vec![Some("partial".into())]);
        assert_eq!(end, buf.len());
    }

    #[test]
    fn csv_records_quote_and_null() {
        let o = opts(CopyFormat::Csv);
        let buf = b"1,\"a,\"\"b\"\"\nc\",,\"\"\r\n2";
        let (f, next) = collect(|f| split_csv(buf, 0, &o, false, f)).unwrap();
        assert_eq!(
            texts(f),
            vec![
                Some("1".into()),
                Some("a,\"b\"\nc".into()),
                None,
                Some("".into())
            ]
        );
        assert!(collect(|f| split_csv(buf, next, &o, false, f)).is_none());
        let (f, _) = collect(|f| split_csv(buf, next, &o, true, f)).unwrap();
        assert_eq!(texts(f), vec![Some("2".into())]);
    }

    #[test]
    fn csv_simple_and_general_paths_agree() {
        let o = opts(CopyFormat::Csv);
        for rec in [
            &b"1,abc,\"q,uoted\",,\"\"\n"[..],
            b"2,x\r\n",
            b"3,\"a\"\"b\",c\n",
            b"4,\"multi\nline\",d\n",
            b"5,\"crlf\"\r\n",
        ] {
            let general = texts(
                collect(|f| split_csv_general(rec, 0, &o, false, f))
                    .unwrap()
                    .0,
            );
            let any = texts(collect(|f| split_csv(rec, 0, &o, false, f)).unwrap().0);
            assert_eq!(general, any, "{}", String::from_utf8_lossy(rec));
        }
        assert!(collect(|f| simple_csv_record(b"1,\"a\"\"b\"\n", 0, &o, f)).is_none());
        assert!(collect(|f| simple_csv_record(b"1,abc", 0, &o, f)).is_none());
    }

    #[test]
    fn writer_escapes_per_format() {
        use datafusion::arrow::array::Int64Array;
        use datafusion::arrow::datatypes::{Field as AField, Schema};
        let schema = Arc::new(Schema::new(vec![
            AField::new("id", DataType::Int64, true),
            AField::new("s", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(vec![Some(1), None, Some(3)])),
                Arc::new(StringArray::from(vec![Some("a\tb"), Some(""), None])),
            ],
        )
        .unwrap();
        let text = CopyWriter::new(
            &schema,
            opts(CopyFormat::Text),
            crate::sql::time_zone::Zone::utc(),
        );
        let lines: Vec<Bytes> = text.lines(&batch).unwrap();
        assert_eq!(
            lines,
            vec![
                Bytes::from_static(b"1\ta\\tb\n"),
                Bytes::from_static(b"\\N\t\n"),
                Bytes::from_static(b"3\t\\N\n")
            ]
        );
        let csv = CopyWriter::new(
            &schema,
            opts(CopyFormat::Csv),
            crate::sql::time_zone::Zone::utc(),
        );
        assert_eq!(
            csv.lines(&batch).unwrap(),
            vec![
                Bytes::from_static(b"1,a\tb\n"),
                Bytes::from_static(b",\"\"\n"),
                Bytes::from_static(b"3,\n")
            ]
        );
    }
}
