//! Results that reach the client as they are produced: the simple-query loop (which sends
//! each statement's response itself instead of collecting them), SUBSCRIBE rows, COPY out
//! and in.
//!
//! Rows are written with `feed` and the connection is flushed whenever the result stream
//! has nothing ready, so a subscriber sees each change as soon as its epoch is published,
//! while a large finite result still goes out in big writes.

use std::fmt::Debug;
use std::sync::Arc;

use futures::{FutureExt, Sink, SinkExt, Stream, StreamExt, stream};
use pgwire::api::copy::send_copy_in_response;
use pgwire::api::results::{CopyResponse, FieldInfo, Response, Tag};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::copy::{CopyData, CopyDone, CopyOutResponse};
use pgwire::messages::data::{DataRow, RowDescription};
use pgwire::messages::response::EmptyQueryResponse;

use crate::engine::CopyRows;
use crate::error::WeirError;
use crate::server::copy::CopyWriter;
use crate::server::encode::{ColumnPlan, encode_batch};
use crate::serving::subscribe::SubscribeStream;

use super::handler::QueryCancel;

/// How long a subscription may send nothing before a keepalive goes out. A client that went
/// away is only noticed when a write fails, so an idle subscription writes a harmless
/// ParameterStatus (clients accept those at any time) to find out and clean up.
pub const KEEPALIVE: std::time::Duration = std::time::Duration::from_secs(1);

fn keepalive() -> PgWireBackendMessage {
    PgWireBackendMessage::ParameterStatus(pgwire::messages::startup::ParameterStatus::new(
        "is_superuser".into(),
        "on".into(),
    ))
}

/// Send every item of `items`, flushing whenever the next one is not ready yet. Returns how
/// many were sent. With `keep_alive`, waiting longer than [`KEEPALIVE`] sends a keepalive.
/// An error item (the statement failed while producing them) ends the sending and is
/// returned as an error, like a failed write.
pub async fn send_flushing<C, T>(
    client: &mut C,
    items: &mut (impl Stream<Item = PgWireResult<T>> + Unpin),
    wrap: impl Fn(T) -> PgWireBackendMessage,
    keep_alive: bool,
) -> PgWireResult<usize>
where
    C: Sink<PgWireBackendMessage> + Unpin,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    match send_items(client, items, wrap, keep_alive).await? {
        Ok(n) => Ok(n),
        Err(e) => Err(e),
    }
}

/// [`send_flushing`], telling the statement's error (the inner result, after the items
/// before it went out) from the connection's (the outer one).
pub async fn send_items<C, T>(
    client: &mut C,
    items: &mut (impl Stream<Item = PgWireResult<T>> + Unpin),
    wrap: impl Fn(T) -> PgWireBackendMessage,
    keep_alive: bool,
) -> PgWireResult<Result<usize, PgWireError>>
where
    C: Sink<PgWireBackendMessage> + Unpin,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let mut n = 0;
    loop {
        let next = match items.next().now_or_never() {
            Some(x) => x,
            None => {
                client.flush().await?;
                if keep_alive {
                    loop {
                        match tokio::time::timeout(KEEPALIVE, items.next()).await {
                            Ok(x) => break x,
                            Err(_) => client.send(keepalive()).await?,
                        }
                    }
                } else {
                    items.next().await
                }
            }
        };
        match next {
            Some(Ok(item)) => {
                client.feed(wrap(item)).await?;
                n += 1;
            }
            Some(Err(e)) => return Ok(Err(e)),
            None => return Ok(Ok(n)),
        }
    }
}

/// How a statement's response went out in the simple query protocol.
pub enum Sent {
    Done,
    /// It started a COPY FROM STDIN (the client now sends data; no ReadyForQuery yet).
    CopyIn,
    /// It failed while its rows were going out: the rows before the error and an
    /// ErrorResponse were sent.
    Failed(WeirError),
}

fn statement_error(e: PgWireError) -> WeirError {
    match e {
        PgWireError::UserError(info) => {
            let code = crate::error::code_from_str(&info.code);
            let mut w = WeirError::new(code, info.message.clone());
            w.detail = info.detail.clone();
            w.hint = info.hint.clone();
            w
        }
        other => WeirError::internal(other.to_string()),
    }
}

/// Send one statement's response in the simple query protocol.
pub async fn send_simple_response<C>(
    client: &mut C,
    response: Response,
    endless_copy: bool,
) -> PgWireResult<Sent>
where
    C: Sink<PgWireBackendMessage> + Unpin,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    match response {
        Response::EmptyQuery => {
            client
                .feed(PgWireBackendMessage::EmptyQueryResponse(
                    EmptyQueryResponse::new(),
                ))
                .await?;
        }
        Response::Query(q) => {
            let tag = q.command_tag().to_owned();
            let fields = q.row_schema();
            client
                .feed(PgWireBackendMessage::RowDescription(row_description(
                    &fields,
                )))
                .await?;
            // a SUBSCRIBE never ends: keep checking the client is there
            let endless = tag == "SUBSCRIBE";
            let mut rows = q.data_rows;
            match send_items(client, &mut rows, PgWireBackendMessage::DataRow, endless).await? {
                Ok(n) => {
                    client
                        .feed(PgWireBackendMessage::CommandComplete(
                            Tag::new(&tag).with_rows(n).into(),
                        ))
                        .await?;
                }
                Err(e) => return fail(client, e).await,
            }
        }
        Response::Execution(tag)
        | Response::TransactionStart(tag)
        | Response::TransactionEnd(tag) => {
            client
                .feed(PgWireBackendMessage::CommandComplete(tag.into()))
                .await?;
        }
        Response::Error(e) => {
            client
                .feed(PgWireBackendMessage::ErrorResponse((*e).into()))
                .await?;
        }
        Response::CopyIn(c) => {
            send_copy_in_response(client, c).await?;
            return Ok(Sent::CopyIn);
        }
        Response::CopyOut(c) => {
            if let Err(e) = send_copy_out_items(client, c, endless_copy).await? {
                return fail(client, e).await;
            }
        }
        Response::CopyBoth(_) => {
            return Err(WeirError::internal("COPY BOTH is not used").into_pgwire());
        }
    }
    Ok(Sent::Done)
}

/// The statement failed after part of its response went out: end it with its error.
async fn fail<C>(client: &mut C, e: PgWireError) -> PgWireResult<Sent>
where
    C: Sink<PgWireBackendMessage> + Unpin,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let info = match &e {
        PgWireError::UserError(info) => {
            let mut copy = ErrorInfo::new(
                info.severity.clone(),
                info.code.clone(),
                info.message.clone(),
            );
            copy.detail = info.detail.clone();
            copy.hint = info.hint.clone();
            copy.where_context = info.where_context.clone();
            copy.position = info.position.clone();
            copy
        }
        other => WeirError::internal(other.to_string()).into_error_info(),
    };
    client
        .feed(PgWireBackendMessage::ErrorResponse(info.into()))
        .await?;
    Ok(Sent::Failed(statement_error(e)))
}

pub fn row_description(fields: &[FieldInfo]) -> RowDescription {
    RowDescription::new(fields.iter().map(Into::into).collect())
}

/// CopyOutResponse, the data (flushed whenever the source waits), CopyDone and `COPY n`.
/// An error in the middle ends the copy with an ErrorResponse (as Postgres does).
pub async fn send_copy_out<C>(client: &mut C, c: CopyResponse, endless: bool) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    send_copy_out_items(client, c, endless).await?
}

async fn send_copy_out_items<C>(
    client: &mut C,
    c: CopyResponse,
    endless: bool,
) -> PgWireResult<Result<(), PgWireError>>
where
    C: Sink<PgWireBackendMessage> + Unpin,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let formats = c.column_formats();
    client
        .feed(PgWireBackendMessage::CopyOutResponse(CopyOutResponse::new(
            c.format,
            c.columns as i16,
            formats,
        )))
        .await?;
    let mut data = c.data_stream;
    let lines = match send_items(client, &mut data, PgWireBackendMessage::CopyData, endless).await?
    {
        Ok(n) => n,
        Err(e) => return Ok(Err(e)),
    };
    client
        .feed(PgWireBackendMessage::CopyDone(CopyDone::new()))
        .await?;
    client
        .feed(PgWireBackendMessage::CommandComplete(
            Tag::new("COPY").with_rows(lines).into(),
        ))
        .await?;
    Ok(Ok(()))
}

/// A subscription as data rows; ends with 57014 when the query is canceled.
pub fn subscribe_rows(
    sub: SubscribeStream,
    plans: Vec<ColumnPlan>,
    cancel: Arc<QueryCancel>,
) -> impl Stream<Item = PgWireResult<DataRow>> + Send + 'static {
    batches_of_subscription(sub, cancel).flat_map(move |b| {
        let items: Vec<PgWireResult<DataRow>> = match b.and_then(|b| encode_batch(&b, &plans)) {
            Ok(rows) => rows.into_iter().map(Ok).collect(),
            Err(e) => vec![Err(e.into_pgwire())],
        };
        stream::iter(items)
    })
}

fn batches_of_subscription(
    sub: SubscribeStream,
    cancel: Arc<QueryCancel>,
) -> impl Stream<Item = Result<datafusion::arrow::record_batch::RecordBatch, WeirError>> + Send + 'static
{
    stream::unfold(Some(sub), move |state| {
        let cancel = cancel.clone();
        async move {
            let mut s = state?;
            tokio::select! {
                _ = cancel.cancelled() => Some((Err(cancel.error()), None)),
                item = s.next() => item.map(|r| (r, Some(s))),
            }
        }
    })
}

/// COPY TO data: one CopyData per row (and the header line first, when asked for).
pub fn copy_data(
    rows: CopyRows,
    mut writer: CopyWriter,
    cancel: Arc<QueryCancel>,
    timer: Option<crate::server::session::TimeoutGuard>,
) -> impl Stream<Item = PgWireResult<CopyData>> + Send + 'static {
    let header = writer.header().map(|h| Ok(CopyData::new(h)));
    let batches: std::pin::Pin<
        Box<
            dyn Stream<Item = Result<datafusion::arrow::record_batch::RecordBatch, WeirError>>
                + Send,
        >,
    > = match rows {
        CopyRows::Subscribe(sub) => Box::pin(batches_of_subscription(sub, cancel)),
        CopyRows::Stream(s) => Box::pin(super::handler::cancellable(s, cancel, timer)),
    };
    let lines = batches.flat_map(move |b| {
        let items: Vec<PgWireResult<CopyData>> = match b.and_then(|b| writer.lines(&b)) {
            Ok(lines) => lines.into_iter().map(|l| Ok(CopyData::new(l))).collect(),
            Err(e) => vec![Err(e.into_pgwire())],
        };
        stream::iter(items)
    });
    stream::iter(header).chain(lines)
}
