//! One client connection, from accept to close: TLS/SSL negotiation and pgwire's message
//! dispatch, with what pgwire's own loop does not do:
//!
//! - every frontend message is checked against the protocol's layout before pgwire decodes
//!   it ([`FrameGuard`]): a message that ends early, a count or length that runs past its
//!   message, trailing bytes, an unknown type. Such a connection gets `FATAL 08P01 invalid
//!   message format` and is closed, as Postgres does (pgwire's decoders read such bytes
//!   past the message or panic);
//! - a panic while handling a message ends that connection with `FATAL XX000`, logged,
//!   instead of vanishing;
//! - `idle_in_transaction_session_timeout`: a session idle inside a transaction block for
//!   longer is ended with `FATAL 25P03` (its block rolls back, as on any disconnect);
//! - past `--max-connections` a new connection is answered `FATAL 53300 sorry, too many
//!   clients already` after its startup packet (cancel requests are still served).

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, BytesMut};
use futures::{FutureExt, SinkExt, StreamExt};
use pgwire::api::{ClientInfo, PgWireConnectionState};
use pgwire::error::{ErrorInfo, PgWireError};
use pgwire::messages::response::TransactionStatus;
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use pgwire::tokio::server::{MaybeTls, PgWireMessageServerCodec, negotiate_tls, process_error};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_util::codec::{Framed, FramedParts};
use tracing::{info, warn};

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::{WeirError, sqlstate};
use crate::server::handler::WeirBackend;

/// Time a client has to finish its startup (pgwire's own limit).
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
/// Time a refused client has to send its startup packet.
const REFUSED_STARTUP_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest startup packet (Postgres' limit).
const MAX_STARTUP_PACKET: usize = 10_000;
/// Largest typed message (pgwire's and Postgres' limit, 1 GB).
const MAX_MESSAGE: usize = 0x3fff_ffff;

const SSL_REQUEST: u32 = 80_877_103;
const GSS_REQUEST: u32 = 80_877_104;
const CANCEL_REQUEST: u32 = 80_877_102;

type Socket =
    Framed<FrameGuard<MaybeTls>, PgWireMessageServerCodec<crate::server::handler::Prepared>>;

/// Serve one connection. `refuse` answers its startup with that error (too many
/// connections) instead of serving it.
pub async fn serve(tcp: TcpStream, backend: Arc<WeirBackend>, refuse: Option<WeirError>) {
    let peer = tcp.peer_addr().ok();
    let local = tcp.local_addr().ok();
    let startup_limit = if refuse.is_some() {
        REFUSED_STARTUP_TIMEOUT
    } else {
        STARTUP_TIMEOUT
    };
    let startup_deadline = tokio::time::Instant::now() + startup_limit;
    let negotiated =
        tokio::time::timeout_at(startup_deadline, negotiate_tls(tcp, backend.tls.clone())).await;
    let framed = match negotiated {
        Ok(Ok(Some(f))) => f,
        Ok(Ok(None)) | Err(_) => return,
        Ok(Err(e)) => {
            info!(?peer, error = %e, "connection closed during negotiation");
            return;
        }
    };
    // bytes negotiation read ahead go through the guard like everything after them
    let parts = framed.into_parts();
    let guard = FrameGuard::new(parts.io, parts.read_buf);
    let mut new_parts = FramedParts::new(guard, parts.codec);
    new_parts.write_buf = parts.write_buf;
    let mut socket: Socket = Framed::from_parts(new_parts);
    if let Some(l) = local {
        socket.session_extensions().insert(LocalAddr(l));
    }
    if let MaybeTls::Tls(tls) = &socket.get_ref().inner {
        let session = crate::server::tls::TlsSession::of(tls.get_ref().1);
        info!(?peer, version = %session.info.version, cipher = %session.info.cipher, client_cn = ?session.client_cn, "TLS negotiated");
        socket.session_extensions().insert(session);
    }
    if let Err(e) = message_loop(&mut socket, &backend, refuse, startup_deadline).await {
        info!(?peer, error = %e, "connection closed with error");
    }
}

/// The server's address a connection came in on (`inet_server_addr()`).
pub struct LocalAddr(pub std::net::SocketAddr);

fn fatal(code: &str, message: impl Into<String>) -> PgWireBackendMessage {
    PgWireBackendMessage::ErrorResponse(
        ErrorInfo::new("FATAL".to_owned(), code.to_owned(), message.into()).into(),
    )
}

async fn send_fatal(socket: &mut Socket, code: &str, message: impl Into<String>) {
    let _ = socket.send(fatal(code, message)).await;
    let _ = socket.close().await;
}

/// The idle-in-transaction limit of the connection's session, if one is set and the
/// session is inside a block.
fn idle_limit(socket: &Socket, handle: &crate::server::handler::Handle) -> Option<Duration> {
    if matches!(socket.transaction_status(), TransactionStatus::Idle)
        || !matches!(socket.state(), PgWireConnectionState::ReadyForQuery)
    {
        return None;
    }
    handle.idle_in_transaction_timeout(socket)
}

async fn message_loop(
    socket: &mut Socket,
    backend: &Arc<WeirBackend>,
    refuse: Option<WeirError>,
    startup_deadline: tokio::time::Instant,
) -> io::Result<()> {
    let handle = backend.handle();
    let cancel = backend.cancel();
    loop {
        let starting = matches!(
            socket.state(),
            PgWireConnectionState::AwaitingStartup
                | PgWireConnectionState::AuthenticationInProgress
        );
        // pg_terminate_backend
        let interrupt = socket
            .session_extensions()
            .get::<crate::server::handler::QueryCancel>();
        if interrupt.as_ref().is_some_and(|i| i.terminated()) {
            info!(peer = %socket.socket_addr(), "terminated by pg_terminate_backend");
            send_fatal(
                socket,
                crate::server::session::ADMIN_SHUTDOWN,
                "terminating connection due to administrator command",
            )
            .await;
            return Ok(());
        }
        // the next message; Stop when the connection ends without one (its FATAL sent)
        enum Next<M> {
            Message(M),
            /// A notification for a session idle between transactions (`LISTEN`).
            Notify(crate::server::notifications::Notification),
            Stop,
        }
        let inbox = (!starting
            && matches!(socket.state(), PgWireConnectionState::ReadyForQuery)
            && matches!(socket.transaction_status(), TransactionStatus::Idle))
        .then(|| handle.inbox(socket))
        .flatten();
        let waiting = async {
            if starting {
                match tokio::time::timeout_at(startup_deadline, socket.next()).await {
                    Ok(m) => Next::Message(m),
                    Err(_) => Next::Stop,
                }
            } else if let Some(limit) = idle_limit(socket, &handle) {
                match tokio::time::timeout(limit, socket.next()).await {
                    Ok(m) => Next::Message(m),
                    Err(_) => {
                        info!(peer = %socket.socket_addr(), "idle-in-transaction timeout");
                        send_fatal(
                            socket,
                            sqlstate::IDLE_IN_TRANSACTION_TIMEOUT,
                            "terminating connection due to idle-in-transaction timeout",
                        )
                        .await;
                        Next::Stop
                    }
                }
            } else if let Some(inbox) = &inbox {
                tokio::select! {
                    m = socket.next() => Next::Message(m),
                    n = inbox.next() => Next::Notify(n),
                }
            } else {
                Next::Message(socket.next().await)
            }
        };
        let next = match interrupt.filter(|_| !starting) {
            // (or pg_terminate_backend, while it waits)
            Some(i) => tokio::select! {
                n = waiting => n,
                _ = i.until_terminated() => continue,
            },
            None => waiting.await,
        };
        let next = match next {
            Next::Message(m) => m,
            Next::Notify(n) => {
                socket
                    .send(crate::server::handler::notification_message(n))
                    .await
                    .map_err(io::Error::other)?;
                continue;
            }
            Next::Stop => return Ok(()),
        };
        let msg = match next {
            None => return Ok(()),
            Some(Ok(m)) => m,
            Some(Err(e)) => {
                let violation = socket.get_ref().violation.take();
                let text = match (violation, &e) {
                    (Some(v), _) => v,
                    (None, PgWireError::IoError(_)) => return Ok(()),
                    (None, other) => format!("invalid message format: {other}"),
                };
                warn!(peer = %socket.socket_addr(), error = %text, "protocol violation");
                send_fatal(socket, sqlstate::PROTOCOL_VIOLATION, text).await;
                return Ok(());
            }
        };
        if matches!(msg, PgWireFrontendMessage::Terminate(_)) {
            return Ok(());
        }
        if let Some(e) = &refuse
            && matches!(msg, PgWireFrontendMessage::Startup(_))
        {
            send_fatal(socket, e.code, e.message.clone()).await;
            return Ok(());
        }
        let is_extended = match socket.state() {
            PgWireConnectionState::CopyInProgress(extended) => extended,
            _ => msg.is_extended_query(),
        };
        let outcome = std::panic::AssertUnwindSafe(pgwire::tokio::server::process_message(
            msg,
            socket,
            handle.clone(),
            handle.clone(),
            handle.clone(),
            handle.clone(),
            cancel.clone(),
        ))
        .catch_unwind()
        .await;
        if starting
            && socket
                .session_extensions()
                .get::<crate::server::handler::CloseConnection>()
                .is_some()
        {
            let _ = socket.close().await;
            return Ok(());
        }
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(e)) => process_error(socket, e, is_extended).await?,
            Err(panic) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "panic".into());
                warn!(peer = %socket.socket_addr(), panic = %what, "internal error while serving a message; connection closed");
                send_fatal(
                    socket,
                    sqlstate::INTERNAL_ERROR,
                    format!("internal error: {what}"),
                )
                .await;
                return Ok(());
            }
        }
    }
}

/// Connections open now, against `--max-connections`.
#[derive(Debug)]
pub struct ConnectionSlots {
    open: AtomicUsize,
    max: usize,
}

/// Holds one connection slot; gives it back when dropped.
pub struct ConnectionSlot {
    slots: Arc<ConnectionSlots>,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.slots.open.fetch_sub(1, Ordering::AcqRel);
    }
}

impl ConnectionSlots {
    pub fn new(max: usize) -> Arc<ConnectionSlots> {
        Arc::new(ConnectionSlots {
            open: AtomicUsize::new(0),
            max,
        })
    }

    pub fn max(&self) -> usize {
        self.max
    }

    pub fn open(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// A slot, or None when `max` connections are open.
    pub fn try_acquire(self: &Arc<Self>) -> Option<ConnectionSlot> {
        let mut cur = self.open.load(Ordering::Acquire);
        loop {
            if cur >= self.max {
                return None;
            }
            match self
                .open
                .compare_exchange(cur, cur + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    return Some(ConnectionSlot {
                        slots: self.clone(),
                    });
                }
                Err(now) => cur = now,
            }
        }
    }
}

/// What the guard is reading.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// Untyped packets: SSLRequest, GSSENCRequest, CancelRequest, the startup packet.
    Startup,
    /// Typed messages.
    Typed,
    /// After a cancel request nothing else may come.
    Done,
}

/// A stream that hands the decoder only messages laid out as the protocol says (see the
/// module header). Bytes pass through unchanged; a malformed message makes the read fail
/// with `violation` set to what was wrong.
pub struct FrameGuard<S> {
    inner: S,
    /// Bytes read from `inner` (or read ahead before the guard existed), not yet released.
    buf: BytesMut,
    /// Bytes at the front of `buf` that are checked and may be released.
    ready: usize,
    /// Bytes of the current long message (Query, CopyData) still to pass through.
    streaming: usize,
    /// The current streamed message is a Query: its text must have no NUL before the last
    /// byte, which must be NUL.
    streaming_query: bool,
    phase: Phase,
    eof: bool,
    pub violation: ViolationSlot,
}

/// Where the guard leaves the reason it refused a message.
#[derive(Default)]
pub struct ViolationSlot(parking_lot::Mutex<Option<String>>);

impl ViolationSlot {
    pub fn take(&self) -> Option<String> {
        self.0.lock().take()
    }
}

impl<S> FrameGuard<S> {
    pub fn new(inner: S, read_ahead: BytesMut) -> Self {
        FrameGuard {
            inner,
            buf: read_ahead,
            ready: 0,
            streaming: 0,
            streaming_query: false,
            phase: Phase::Startup,
            eof: false,
            violation: ViolationSlot::default(),
        }
    }

    fn refuse(&self, why: String) -> io::Error {
        *self.violation.0.lock() = Some(why.clone());
        io::Error::new(io::ErrorKind::InvalidData, why)
    }

    /// Check what is buffered as far as it can be checked; `Ok` means `ready` moved or
    /// more bytes are needed.
    fn advance(&mut self) -> Result<(), String> {
        loop {
            let avail = self.buf.len() - self.ready;
            if avail == 0 {
                return Ok(());
            }
            if self.streaming > 0 {
                let n = self.streaming.min(avail);
                if self.streaming_query {
                    let chunk = &self.buf[self.ready..self.ready + n];
                    let last = self.streaming == n;
                    let body = if last { &chunk[..n - 1] } else { chunk };
                    if body.contains(&0) {
                        return Err(
                            "invalid message format: query string holds a NUL byte before its end"
                                .into(),
                        );
                    }
                    if last && chunk[n - 1] != 0 {
                        return Err("invalid message format: query string is not terminated".into());
                    }
                }
                self.ready += n;
                self.streaming -= n;
                continue;
            }
            let rest = &self.buf[self.ready..];
            match self.phase {
                Phase::Done => {
                    return Err("invalid message format: data after a cancel request".into());
                }
                Phase::Startup => {
                    if rest.len() < 8 {
                        return Ok(());
                    }
                    let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
                    let code = u32::from_be_bytes([rest[4], rest[5], rest[6], rest[7]]);
                    if !(8..=MAX_STARTUP_PACKET).contains(&len) {
                        return Err(format!("invalid length of startup packet: {len}"));
                    }
                    if rest.len() < len {
                        return Ok(());
                    }
                    let body = &rest[8..len];
                    match code {
                        SSL_REQUEST | GSS_REQUEST if len == 8 => {}
                        CANCEL_REQUEST if len >= 12 => self.phase = Phase::Done,
                        SSL_REQUEST | GSS_REQUEST | CANCEL_REQUEST => {
                            return Err(
                                "invalid message format: bad length of a negotiation packet".into(),
                            );
                        }
                        v if v >> 16 == 3 => {
                            check_startup_parameters(body)?;
                            self.phase = Phase::Typed;
                        }
                        v => {
                            return Err(format!(
                                "unsupported frontend protocol {}.{}: server supports 3.0",
                                v >> 16,
                                v & 0xffff
                            ));
                        }
                    }
                    self.ready += len;
                }
                Phase::Typed => {
                    if rest.len() < 5 {
                        return Ok(());
                    }
                    let ty = rest[0];
                    let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
                    if len < 4 {
                        return Err(format!("invalid message length {len}"));
                    }
                    if len > MAX_MESSAGE {
                        return Err(format!("invalid message length {len}: larger than 1 GB"));
                    }
                    match ty {
                        // long messages pass through as they arrive
                        b'Q' | b'd' | b'p' => {
                            if ty == b'Q' && len < 5 {
                                return Err("invalid message format: empty Query message".into());
                            }
                            self.ready += 5;
                            self.streaming = len - 4;
                            self.streaming_query = ty == b'Q';
                        }
                        b'P' | b'B' | b'D' | b'E' | b'C' | b'f' | b'S' | b'H' | b'X' | b'c' => {
                            if rest.len() < 1 + len {
                                return Ok(());
                            }
                            check_body(ty, &rest[5..1 + len])?;
                            self.ready += 1 + len;
                        }
                        other => {
                            return Err(format!(
                                "invalid frontend message type {}",
                                if other.is_ascii_graphic() {
                                    format!("'{}'", other as char)
                                } else {
                                    format!("{other}")
                                }
                            ));
                        }
                    }
                }
            }
        }
    }
}

/// Reads a typed message body as the protocol lays it out.
struct Body<'a> {
    b: &'a [u8],
    what: &'static str,
}

impl<'a> Body<'a> {
    fn short(&self) -> String {
        format!("invalid message format: {} message ends early", self.what)
    }
    fn cstring(&mut self) -> Result<&'a [u8], String> {
        let end = self.b.iter().position(|c| *c == 0).ok_or_else(|| {
            format!(
                "invalid message format: {} message has an unterminated string",
                self.what
            )
        })?;
        let s = &self.b[..end];
        self.b = &self.b[end + 1..];
        Ok(s)
    }
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.b.len() < n {
            return Err(self.short());
        }
        let (a, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, String> {
        let s = self.take(2)?;
        Ok(u16::from_be_bytes([s[0], s[1]]))
    }
    fn i32(&mut self) -> Result<i32, String> {
        let s = self.take(4)?;
        Ok(i32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }
    fn end(&self) -> Result<(), String> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "invalid message format: {} message has {} bytes after its end",
                self.what,
                self.b.len()
            ))
        }
    }
}

fn format_codes(b: &mut Body<'_>, n: usize) -> Result<(), String> {
    for _ in 0..n {
        let f = b.u16()?;
        if f > 1 {
            return Err(format!(
                "invalid message format: unsupported format code {f}"
            ));
        }
    }
    Ok(())
}

/// Check one typed message body.
pub fn check_body(ty: u8, body: &[u8]) -> Result<(), String> {
    let what = match ty {
        b'P' => "Parse",
        b'B' => "Bind",
        b'D' => "Describe",
        b'E' => "Execute",
        b'C' => "Close",
        b'f' => "CopyFail",
        b'S' => "Sync",
        b'H' => "Flush",
        b'X' => "Terminate",
        b'c' => "CopyDone",
        _ => "frontend",
    };
    let mut b = Body { b: body, what };
    match ty {
        b'P' => {
            b.cstring()?;
            b.cstring()?;
            let n = b.u16()? as usize;
            b.take(n.checked_mul(4).ok_or_else(|| b.short())?)?;
        }
        b'B' => {
            b.cstring()?;
            b.cstring()?;
            let nfmt = b.u16()? as usize;
            format_codes(&mut b, nfmt)?;
            let nparams = b.u16()? as usize;
            if nfmt > 1 && nfmt != nparams {
                return Err(format!(
                    "bind message has {nfmt} parameter formats but {nparams} parameters"
                ));
            }
            for i in 0..nparams {
                let len = b.i32()?;
                if len < -1 {
                    return Err(format!(
                        "invalid message format: parameter {} has length {len}",
                        i + 1
                    ));
                }
                if len > 0 {
                    b.take(len as usize).map_err(|_| {
                        format!(
                            "invalid message format: parameter {} runs past the end of the Bind message",
                            i + 1
                        )
                    })?;
                }
            }
            let nres = b.u16()? as usize;
            format_codes(&mut b, nres)?;
        }
        b'D' | b'C' => {
            let t = b.u8()?;
            if t != b'S' && t != b'P' {
                return Err(format!(
                    "invalid {what} message subtype {}",
                    if t.is_ascii_graphic() {
                        (t as char).to_string()
                    } else {
                        t.to_string()
                    }
                ));
            }
            b.cstring()?;
        }
        b'E' => {
            b.cstring()?;
            b.i32()?;
        }
        b'f' => {
            b.cstring()?;
        }
        _ => {}
    }
    b.end()
}

/// The startup packet's parameters: NUL-terminated name/value pairs, then one NUL.
fn check_startup_parameters(body: &[u8]) -> Result<(), String> {
    let mut b = Body {
        b: body,
        what: "startup",
    };
    loop {
        let name = b.cstring()?;
        if name.is_empty() {
            return b.end();
        }
        b.cstring()?;
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for FrameGuard<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.ready > 0 {
                let n = this.ready.min(out.remaining());
                out.put_slice(&this.buf[..n]);
                this.buf.advance(n);
                this.ready -= n;
                return Poll::Ready(Ok(()));
            }
            if let Err(why) = this.advance() {
                return Poll::Ready(Err(this.refuse(why)));
            }
            if this.ready > 0 {
                continue;
            }
            if this.eof {
                // an incomplete message at the end: the decoder sees it end
                let n = this.buf.len().min(out.remaining());
                out.put_slice(&this.buf[..n]);
                this.buf.advance(n);
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 16 * 1024];
            let mut rb = ReadBuf::new(&mut chunk);
            match Pin::new(&mut this.inner).poll_read(cx, &mut rb) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {
                    if rb.filled().is_empty() {
                        this.eof = true;
                    } else {
                        this.buf.extend_from_slice(rb.filled());
                    }
                }
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for FrameGuard<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(ty: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![ty];
        v.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        v.extend_from_slice(body);
        v
    }

    fn startup() -> Vec<u8> {
        let mut body = 196_608u32.to_be_bytes().to_vec();
        body.extend_from_slice(b"user\0weir\0\0");
        let mut v = ((body.len() + 4) as u32).to_be_bytes().to_vec();
        v.extend_from_slice(&body);
        v
    }

    /// Feed bytes through a guard; Ok(bytes released) or the violation.
    fn run(bytes: &[u8]) -> Result<Vec<u8>, String> {
        let mut g = FrameGuard::new((), BytesMut::from(bytes));
        g.advance()?;
        Ok(g.buf[..g.ready].to_vec())
    }

    #[test]
    fn well_formed_messages_pass() {
        let mut s = startup();
        s.extend(msg(b'Q', b"SELECT 1\0"));
        let mut parse = b"s1\0SELECT $1\0".to_vec();
        parse.extend_from_slice(&1u16.to_be_bytes());
        parse.extend_from_slice(&23u32.to_be_bytes());
        s.extend(msg(b'P', &parse));
        let mut bind = b"\0s1\0".to_vec();
        bind.extend_from_slice(&1u16.to_be_bytes());
        bind.extend_from_slice(&1u16.to_be_bytes());
        bind.extend_from_slice(&1u16.to_be_bytes());
        bind.extend_from_slice(&4i32.to_be_bytes());
        bind.extend_from_slice(&7i32.to_be_bytes());
        bind.extend_from_slice(&0u16.to_be_bytes());
        s.extend(msg(b'B', &bind));
        s.extend(msg(b'E', b"\0\0\0\0\0"));
        s.extend(msg(b'S', b""));
        assert_eq!(run(&s).unwrap(), s);
    }

    #[test]
    fn malformed_messages_are_refused() {
        let with = |m: Vec<u8>| {
            let mut s = startup();
            s.extend(m);
            run(&s)
        };
        // Parse ending before its parameter-type count
        assert!(with(msg(b'P', b"\0SELECT 1\0")).is_err());
        // Parse whose type count runs past the message
        assert!(with(msg(b'P', b"\0SELECT 1\0\0\x05\0\0\0\x17")).is_err());
        // Bind whose parameter length runs past the message
        let mut bind = b"\0\0".to_vec();
        bind.extend_from_slice(&0u16.to_be_bytes());
        bind.extend_from_slice(&1u16.to_be_bytes());
        bind.extend_from_slice(&1000i32.to_be_bytes());
        bind.extend_from_slice(b"abc");
        assert!(with(msg(b'B', &bind)).is_err());
        // trailing bytes, bad subtype, unknown type, short length
        assert!(with(msg(b'S', b"x")).is_err());
        assert!(with(msg(b'D', b"Z\0")).is_err());
        assert!(with(msg(b'Z', b"")).is_err());
        assert!(with(vec![b'Q', 0, 0, 0, 2]).is_err());
        // a query string with an inner NUL, or none at its end
        assert!(with(msg(b'Q', b"SELECT 1\0; DROP\0")).is_err());
        assert!(with(msg(b'Q', b"SELECT 1")).is_err());
        // bad startup packets
        assert!(run(&[0, 0, 0, 3, 0, 3, 0, 0]).is_err());
        assert!(run(&[0, 0, 0, 12, 0, 3, 0, 0, b'u', 0, b'x', b'y']).is_err());
    }

    #[test]
    fn slots_are_bounded_and_returned() {
        let s = ConnectionSlots::new(2);
        let a = s.try_acquire().unwrap();
        let _b = s.try_acquire().unwrap();
        assert!(s.try_acquire().is_none());
        drop(a);
        assert!(s.try_acquire().is_some());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 3000, ..Default::default() })]

        /// Any bytes after a valid startup: the guard releases only whole, well-formed
        /// messages (which pgwire then decodes without panicking) or refuses.
        #[test]
        fn guard_never_releases_a_malformed_message(
            tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            ty in proptest::sample::select(b"PBDECfSHXcQdpZ".to_vec()),
        ) {
            let mut bytes = startup();
            let mut m = vec![ty];
            m.extend_from_slice(&((tail.len() + 4) as u32).to_be_bytes());
            m.extend_from_slice(&tail);
            bytes.extend_from_slice(&m);
            bytes.extend_from_slice(&tail);
            if let Ok(released) = run(&bytes) {
                // decode what was released the way pgwire will
                let mut buf = BytesMut::from(&released[startup().len()..]);
                let mut ctx = pgwire::messages::DecodeContext::new(
                    pgwire::messages::ProtocolVersion::PROTOCOL3_0,
                );
                ctx.awaiting_frontend_ssl = false;
                ctx.awaiting_frontend_startup = false;
                while !buf.is_empty() {
                    match PgWireFrontendMessage::decode(&mut buf, &ctx) {
                        Ok(Some(_)) => {}
                        _ => break,
                    }
                }
            }
        }

        /// A structured body is accepted only if it is exactly laid out.
        #[test]
        fn bodies_never_panic(
            body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..100),
            ty in proptest::sample::select(b"PBDECfSHXc".to_vec()),
        ) {
            let _ = check_body(ty, &body);
        }
    }

    #[test]
    fn incomplete_messages_wait() {
        let mut s = startup();
        let n = s.len();
        s.extend(&msg(b'P', b"\0SELECT 1\0\0\0")[..6]);
        assert_eq!(run(&s).unwrap().len(), n);
    }
}
