//! Streams a logical replication slot from Rust, with no Python and no libpq: connects to
//! PostgreSQL (TCP or a Unix socket; trust, password, md5 or SCRAM-SHA-256 authentication,
//! no TLS), runs `START_REPLICATION` with pgoutput, decodes the stream into Arrow record
//! batches with [`pgoutput_arrow::Decoder`], and confirms what it handled with
//! [`pgoutput_proto::SessionPositions`], the same positions the Python live stream keeps.
//!
//! ```text
//! cargo run --release -p pgoutput-arrow --example stream_slot -- \
//!     'host=127.0.0.1 port=5432 user=postgres password=secret dbname=app' SLOT PUBLICATION [IDLE_SECONDS]
//! ```
//!
//! The slot and the publication must exist. Each decoded batch is printed as one line
//! (`table NAME: N rows, commit LSNs A..B`); a real consumer stores the batches before it
//! acknowledges them. It stops after IDLE_SECONDS (default 5) without data, confirming
//! everything it printed.
//!
//! The wire protocol of the connection is `postgres-protocol`'s (a dev-dependency: the
//! crates themselves do no I/O); what travels inside CopyData is pgoutput-proto's.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use arrow_array::{Array, UInt64Array};
use arrow_buffer::Buffer;
use bytes::BytesMut;
use fallible_iterator::FallibleIterator;
use pgoutput_arrow::{Decoder, DecoderOptions, Output};
use pgoutput_proto::{parse_copy_data, Lsn, ReplicationMessage, SessionPositions, StandbyStatusUpdate};
use postgres_protocol::authentication::{md5_hash, sasl};
use postgres_protocol::message::{backend, frontend};

type Error = Box<dyn std::error::Error>;

/// A byte stream to the server.
trait Socket: Read + Write {
    fn set_timeout(&self, timeout: Duration) -> io::Result<()>;
}

impl Socket for TcpStream {
    fn set_timeout(&self, timeout: Duration) -> io::Result<()> {
        self.set_read_timeout(Some(timeout))
    }
}

impl Socket for UnixStream {
    fn set_timeout(&self, timeout: Duration) -> io::Result<()> {
        self.set_read_timeout(Some(timeout))
    }
}

/// One connection speaking PostgreSQL's frontend/backend protocol.
struct Connection {
    socket: Box<dyn Socket>,
    read: BytesMut,
    write: BytesMut,
}

impl Connection {
    /// Connects and authenticates as a replication connection (`replication=database`).
    fn open(conninfo: &HashMap<String, String>) -> Result<Self, Error> {
        let get = |k: &str, default: &str| conninfo.get(k).cloned().unwrap_or_else(|| default.to_string());
        let (host, port) = (get("host", "/tmp"), get("port", "5432"));
        let socket: Box<dyn Socket> = if host.starts_with('/') {
            Box::new(UnixStream::connect(format!("{host}/.s.PGSQL.{port}"))
                .map_err(|e| format!("cannot connect to {host}/.s.PGSQL.{port}: {e}"))?)
        } else {
            Box::new(TcpStream::connect(format!("{host}:{port}"))
                .map_err(|e| format!("cannot connect to {host}:{port}: {e}"))?)
        };
        let mut conn = Connection { socket, read: BytesMut::new(), write: BytesMut::new() };
        let user = get("user", &std::env::var("USER").unwrap_or_default());
        let password = conninfo.get("password").cloned().or_else(|| std::env::var("PGPASSWORD").ok());
        let dbname = get("dbname", &user);
        // The output settings: text values printed as the decoder reads them exactly, in UTF-8.
        let mut params = vec![("user", user.as_str()), ("database", dbname.as_str()), ("replication", "database")];
        params.extend_from_slice(pgoutput_proto::OUTPUT_SETTINGS);
        frontend::startup_message(params.iter().copied(), &mut conn.write)?;
        conn.send()?;
        let needs = || password.clone().ok_or("the server asks for a password: give password=... or PGPASSWORD");
        let mut scram: Option<sasl::ScramSha256> = None;
        loop {
            match conn.next()? {
                backend::Message::AuthenticationOk => {}
                backend::Message::AuthenticationCleartextPassword => {
                    frontend::password_message(needs()?.as_bytes(), &mut conn.write)?;
                    conn.send()?;
                }
                backend::Message::AuthenticationMd5Password(body) => {
                    let hash = md5_hash(user.as_bytes(), needs()?.as_bytes(), body.salt());
                    frontend::password_message(hash.as_bytes(), &mut conn.write)?;
                    conn.send()?;
                }
                backend::Message::AuthenticationSasl(body) => {
                    let mechanisms: Vec<&str> = body.mechanisms().collect()?;
                    if !mechanisms.contains(&sasl::SCRAM_SHA_256) {
                        return Err(format!("the server offers SASL {mechanisms:?}, not SCRAM-SHA-256").into());
                    }
                    let s = sasl::ScramSha256::new(needs()?.as_bytes(), sasl::ChannelBinding::unsupported());
                    frontend::sasl_initial_response(sasl::SCRAM_SHA_256, s.message(), &mut conn.write)?;
                    conn.send()?;
                    scram = Some(s);
                }
                backend::Message::AuthenticationSaslContinue(body) => {
                    let s = scram.as_mut().ok_or("SASL continue before SASL start")?;
                    s.update(body.data())?;
                    frontend::sasl_response(s.message(), &mut conn.write)?;
                    conn.send()?;
                }
                backend::Message::AuthenticationSaslFinal(body) => {
                    scram.take().ok_or("SASL final before SASL start")?.finish(body.data())?;
                }
                backend::Message::ReadyForQuery(_) => return Ok(conn),
                backend::Message::ErrorResponse(body) => return Err(server_error(body).into()),
                _ => {} // ParameterStatus, BackendKeyData, NoticeResponse
            }
        }
    }

    /// Runs `command` (START_REPLICATION) and waits for its CopyBothResponse ('W', which
    /// postgres-protocol does not parse: taken here by its tag and length).
    fn start_copy_both(&mut self, command: &str) -> Result<(), Error> {
        frontend::query(command, &mut self.write)?;
        self.send()?;
        loop {
            if self.read.len() >= 5 && self.read[0] == b'W' {
                let len = u32::from_be_bytes([self.read[1], self.read[2], self.read[3], self.read[4]]) as usize;
                if self.read.len() > len {
                    let _ = self.read.split_to(1 + len);
                    return Ok(());
                }
            } else if self.read.len() >= 5 {
                match self.next()? {
                    backend::Message::ErrorResponse(body) => return Err(format!("{command}: {}", server_error(body)).into()),
                    _ => continue,
                }
            }
            self.fill()?;
        }
    }

    /// Reads what the server sent (at least one byte).
    fn fill(&mut self) -> io::Result<()> {
        let mut chunk = [0u8; 64 * 1024];
        let n = self.socket.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the server closed the connection"));
        }
        self.read.extend_from_slice(&chunk[..n]);
        Ok(())
    }

    fn send(&mut self) -> io::Result<()> {
        self.socket.write_all(&self.write)?;
        self.write.clear();
        self.socket.flush()
    }

    /// The next backend message; `WouldBlock`/`TimedOut` when the read timeout passes.
    fn next(&mut self) -> io::Result<backend::Message> {
        loop {
            if let Some(message) = backend::Message::parse(&mut self.read)? {
                return Ok(message);
            }
            self.fill()?;
        }
    }

    /// Tells the server what was written and flushed (the slot's confirmed position).
    fn status(&mut self, positions: &mut SessionPositions) -> Result<(), Error> {
        let (written, flushed) = positions.status(None);
        let micros = SystemTime::now().duration_since(UNIX_EPOCH)?.as_micros() as i64 - 946_684_800_000_000;
        let update = StandbyStatusUpdate {
            written: Lsn(written),
            flushed: Lsn(flushed),
            applied: Lsn(flushed),
            client_clock: micros,
            reply_requested: false,
        };
        frontend::CopyData::new(&update.encode()[..])?.write(&mut self.write);
        Ok(self.send()?)
    }
}

fn server_error(body: backend::ErrorResponseBody) -> String {
    let fields: Vec<(u8, String)> = body
        .fields()
        .map(|f| Ok((f.type_(), String::from_utf8_lossy(f.value_bytes()).into_owned())))
        .collect()
        .unwrap_or_default();
    let field = |t: u8| fields.iter().find(|(k, _)| *k == t).map(|(_, v)| v.as_str()).unwrap_or("");
    format!("server error {}: {}", field(b'C'), field(b'M'))
}

fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Prints each batch handed out; returns how many rows.
fn print(outputs: Vec<Output>) -> usize {
    let mut rows = 0;
    for output in outputs {
        if let Output::Table { name, batch, .. } = output {
            rows += batch.num_rows();
            let commits = batch.column_by_name("_commit_lsn").and_then(|c| c.as_any().downcast_ref::<UInt64Array>().cloned());
            let range = commits
                .filter(|c| !c.is_empty())
                .map(|c| format!(", commit LSNs {}..{}", Lsn(c.value(0)), Lsn(c.value(c.len() - 1))))
                .unwrap_or_default();
            println!("table {name}: {} rows{range}", batch.num_rows());
        }
    }
    rows
}

fn run() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        return Err("usage: stream_slot 'host=... port=... user=... password=... dbname=...' SLOT PUBLICATION [IDLE_SECONDS]".into());
    }
    let conninfo: HashMap<String, String> = args[0]
        .split_whitespace()
        .filter_map(|kv| kv.split_once('=').map(|(k, v)| (k.to_string(), v.trim_matches('\'').to_string())))
        .collect();
    let (slot, publication) = (&args[1], &args[2]);
    let idle = Duration::from_secs_f64(args.get(3).map(|s| s.parse()).transpose()?.unwrap_or(5.0));

    let mut conn = Connection::open(&conninfo)?;
    let mut positions = SessionPositions::new(0);
    let command = format!(
        "START_REPLICATION SLOT {} LOGICAL {} (proto_version '1', publication_names '{}')",
        quote_ident(slot),
        Lsn(positions.resume_lsn(None)),
        quote_ident(publication).replace('\'', "''")
    );
    conn.start_copy_both(&command)?;

    let mut decoder = Decoder::new(DecoderOptions::default());
    conn.socket.set_timeout(Duration::from_millis(200))?;
    let (mut last_data, mut last_status) = (Instant::now(), Instant::now());
    let (mut rows, mut fed) = (0usize, 0usize);
    loop {
        match conn.next() {
            Ok(backend::Message::CopyData(body)) => match parse_copy_data(body.data())? {
                ReplicationMessage::XLogData(x) => {
                    positions.server_end(x.wal_end.0);
                    decoder.push(x.wal_start.0, &Buffer::from(x.data.to_vec()))?;
                    fed += 1;
                    last_data = Instant::now();
                }
                ReplicationMessage::PrimaryKeepalive(k) => {
                    positions.server_end(k.wal_end.0);
                    if k.reply_requested {
                        conn.status(&mut positions)?;
                        last_status = Instant::now();
                    }
                }
            },
            Ok(backend::Message::ErrorResponse(body)) => return Err(server_error(body).into()),
            Ok(backend::Message::CopyDone) => break,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {}
            Err(e) => return Err(e.into()),
        }
        // Caught up, or every 10k messages: hand out what is complete, then acknowledge it
        // (printed is handled, here).
        let caught_up = conn.read.is_empty();
        if fed > 0 && (caught_up || fed >= 10_000) {
            decoder.flush()?;
            let outputs = decoder.take_ready();
            let (_, ack) = positions.handed_out(decoder.safe_lsn(), None, outputs.is_empty());
            rows += print(outputs);
            positions.yielded(ack);
            positions.ack(None)?;
            fed = 0;
        }
        if caught_up {
            positions.idle_advance(decoder.pending_transactions() == 0);
        }
        if positions.dirty() || last_status.elapsed() >= Duration::from_secs(10) {
            conn.status(&mut positions)?;
            last_status = Instant::now();
        }
        if last_data.elapsed() >= idle && caught_up {
            break;
        }
    }
    conn.status(&mut positions)?;
    frontend::copy_done(&mut conn.write);
    frontend::terminate(&mut conn.write);
    conn.send()?;
    eprintln!("{rows} rows; confirmed up to {}", Lsn(positions.confirmed()));
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("stream_slot: error: {e}");
        std::process::exit(1);
    }
}
