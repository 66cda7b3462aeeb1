//! A TCP proxy on loopback that can partition the way a dropping firewall does: the
//! connections it holds take in every byte and deliver none, and stay open, so
//! neither side learns of the partition from TCP. (`iptables` is not on this
//! machine; a refusing partition would be learnt of at once.)
//!
//! A connection made while the proxy is partitioned, or held when it partitions, passes
//! nothing ever after, also once the proxy heals: real TCP would resend into a healed
//! link only after pauses that grow with the partition (tens of seconds after a minute
//! of it), which this models as forever. Connections made after the heal pass.

use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The proxy; dropping it shuts every connection it holds.
pub struct BlackHoleProxy {
    address: SocketAddr,
    state: Arc<State>,
}

struct State {
    /// Bumped by each partition and heal: a connection passes bytes only while the
    /// proxy is in the generation it was made in, unpartitioned.
    generation: AtomicU64,
    partitioned: AtomicBool,
    closed: AtomicBool,
    streams: Mutex<Vec<TcpStream>>,
}

impl BlackHoleProxy {
    /// A proxy to `target`, listening on a free loopback port.
    pub fn to(target: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let address = listener.local_addr().expect("the proxy's address");
        let target: SocketAddr = target.parse().expect("a loopback socket address");
        let state = Arc::new(State {
            generation: AtomicU64::new(0),
            partitioned: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            streams: Mutex::new(Vec::new()),
        });
        let accepting = Arc::clone(&state);
        std::thread::spawn(move || {
            for inbound in listener.incoming() {
                if accepting.closed.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(inbound) = inbound else { continue };
                let Ok(outbound) = TcpStream::connect(target) else {
                    continue;
                };
                let _ = inbound.set_nodelay(true);
                let _ = outbound.set_nodelay(true);
                let born = accepting.generation.load(Ordering::SeqCst);
                let (Ok(in2), Ok(out2)) = (inbound.try_clone(), outbound.try_clone()) else {
                    continue;
                };
                if let Ok(mut streams) = accepting.streams.lock() {
                    for stream in [&inbound, &outbound] {
                        if let Ok(kept) = stream.try_clone() {
                            streams.push(kept);
                        }
                    }
                }
                let (a, b) = (Arc::clone(&accepting), Arc::clone(&accepting));
                std::thread::spawn(move || pipe(inbound, out2, &a, born));
                std::thread::spawn(move || pipe(outbound, in2, &b, born));
            }
        });
        Self { address, state }
    }

    /// Where clients connect instead of the target.
    pub fn address(&self) -> String {
        self.address.to_string()
    }

    /// From now on nothing passes, on any connection held or made.
    pub fn partition(&self) {
        self.state.partitioned.store(true, Ordering::SeqCst);
        self.state.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// Connections made from now on pass; those held stay silent.
    pub fn heal(&self) {
        self.state.generation.fetch_add(1, Ordering::SeqCst);
        self.state.partitioned.store(false, Ordering::SeqCst);
    }
}

impl State {
    fn passes(&self, born: u64) -> bool {
        !self.partitioned.load(Ordering::SeqCst) && self.generation.load(Ordering::SeqCst) == born
    }
}

/// Copies `from` to `to` while the connection passes; swallows what arrives after.
fn pipe(mut from: TcpStream, mut to: TcpStream, state: &State, born: u64) {
    use std::io::{Read, Write};
    let mut buffer = vec![0; 16 << 10];
    loop {
        let read = match from.read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        if state.passes(born) && to.write_all(&buffer[..read]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

impl Drop for BlackHoleProxy {
    fn drop(&mut self) {
        self.state.closed.store(true, Ordering::SeqCst);
        if let Ok(streams) = self.state.streams.lock() {
            for stream in streams.iter() {
                let _ = stream.shutdown(Shutdown::Both);
            }
        }
        // Wakes the accepting thread, which then sees `closed`.
        let _ = TcpStream::connect(self.address);
    }
}
