//! Connections spread evenly over the per-core workers ([`crate::serve::serve_per_core`]).
//!
//! Each worker accepts on its own socket, and the kernel picks the socket of a new connection
//! by a hash of its addresses (`SO_REUSEPORT`), blind to how busy each worker is. With many
//! short connections that evens out; with a few long ones it does not, and HTTP/2 makes them few
//! and long: a proxy, a load balancer or a CDN in front of sluice keeps a handful of connections,
//! each carrying many streams for hours. Two such connections land on one worker half the time,
//! and that worker then does all the work while the other idles (h2load, two connections of 100
//! streams over TLS, self-answered, on 2 cores: 136k-142k requests a second when the kernel put
//! both on one worker, 4 runs of 6; 222k-226k when it did not).
//!
//! So a worker that accepts a connection while another serves fewer hands the connection to
//! the least loaded, which serves it as if it had accepted it. The counts are live connections,
//! not requests: cheap to keep (one atomic add when a connection begins and one when it ends,
//! none per request), and for connections that carry like loads, what decides the balance. A
//! connection counts on the worker it is handed to from the moment it is handed, so a worker
//! busy in a long poll is not handed every connection that arrives meanwhile. A WebSocket
//! relayed after its upgrade runs on a task of its own and is not counted: the balance is of
//! connections still speaking HTTP.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::mpsc;

/// A connection accepted by one worker for another to serve: the socket, taken out of the
/// accepting worker's reactor, the client's address, and its count on the worker it is handed
/// to (counted when it was placed, not when it arrives).
pub type Handed = (std::net::TcpStream, SocketAddr, Live);

/// Where a worker receives the connections other workers hand it.
pub type Inbox = mpsc::UnboundedReceiver<Handed>;

/// What [`Balance::retire`] adds to a worker's count: more connections than it could serve.
const RETIRED: usize = usize::MAX / 2;

/// The live connections of every worker, and the way to hand each one a connection.
#[derive(Debug)]
pub struct Balance {
    /// Connections each worker serves now, by worker index.
    live: Box<[AtomicUsize]>,
    /// Each worker's inbox, by worker index.
    inboxes: Box<[mpsc::UnboundedSender<Handed>]>,
}

/// A connection counted as live on a worker until this is dropped (when the connection ends).
#[derive(Debug)]
pub struct Live {
    /// Whose count this is.
    balance: Arc<Balance>,
    /// The worker serving the connection.
    worker: usize,
}

impl Drop for Live {
    fn drop(&mut self) {
        self.balance.live[self.worker].fetch_sub(1, Ordering::Relaxed);
    }
}

impl Balance {
    /// The balance of `workers` workers (at least 1), and each one's inbox, by index.
    pub fn new(workers: usize) -> (Arc<Self>, Vec<Inbox>) {
        let (inboxes, received): (Vec<_>, Vec<_>) = (0..workers.max(1)).map(|_| mpsc::unbounded_channel()).unzip();
        let live = (0..inboxes.len()).map(|_| AtomicUsize::new(0)).collect();
        (Arc::new(Self { live, inboxes: inboxes.into() }), received)
    }

    /// Which worker should serve a connection `worker` has just accepted: itself, unless
    /// another serves fewer connections by more than an eighth of its own (then the least
    /// loaded; the first of equals). A few long connections are split exactly (below eight,
    /// one fewer is enough); many short ones, whose counts come and go, are not handed over for
    /// every small swing (each hand-over costs two `epoll_ctl` calls and a wake-up). Kept among
    /// equals: handing over would only make the other one ahead.
    pub fn place(&self, worker: usize) -> usize {
        let count = |w: usize| self.live[w].load(Ordering::Relaxed);
        let least = (0..self.live.len()).min_by_key(|&w| count(w)).unwrap_or(worker);
        let fewest = count(least);
        if count(worker) > fewest + fewest / 8 { least } else { worker }
    }

    /// Counts a connection as served by `worker` for as long as the guard lives.
    pub fn serve(self: &Arc<Self>, worker: usize) -> Live {
        self.live[worker].fetch_add(1, Ordering::Relaxed);
        Live { balance: Arc::clone(self), worker }
    }

    /// Hands `connection` to worker `to`; back if that worker has stopped.
    pub fn hand(&self, to: usize, connection: Handed) -> Result<(), Handed> {
        self.inboxes[to].send(connection).map_err(|e| e.0)
    }

    /// Counts worker `worker`, which stopped taking connections (it failed to start, or it is
    /// stopping), as too loaded to be handed any more.
    pub fn retire(&self, worker: usize) {
        self.live[worker].fetch_add(RETIRED, Ordering::Relaxed);
    }

    /// How many connections `worker` serves now.
    pub fn live(&self, worker: usize) -> usize {
        self.live[worker].load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_keeps_its_connection_unless_another_serves_fewer() {
        let (balance, _inboxes) = Balance::new(3);
        assert_eq!(balance.place(1), 1, "all equal: kept");
        let a = balance.serve(1);
        assert_eq!(balance.place(1), 0, "one more than the others: the first of the least loaded");
        assert_eq!(balance.place(0), 0, "among the least loaded: kept");
        let b = balance.serve(0);
        assert_eq!(balance.place(1), 2, "worker 2 is now the least loaded");
        let c = balance.serve(2);
        assert_eq!((balance.place(0), balance.place(1), balance.place(2)), (0, 1, 2), "all equal again");
        drop((a, b));
        assert_eq!((balance.live(0), balance.live(1), balance.live(2)), (0, 0, 1), "an ended connection is uncounted");
        assert_eq!(balance.place(2), 0);
        drop(c);
    }

    #[test]
    fn among_many_connections_a_swing_of_an_eighth_is_left_alone() {
        let (balance, _inboxes) = Balance::new(2);
        let held: Vec<Live> = (0..16).map(|_| balance.serve(0)).chain((0..18).map(|_| balance.serve(1))).collect();
        assert_eq!(balance.place(1), 1, "18 against 16: within an eighth of 16");
        let more = balance.serve(1);
        assert_eq!(balance.place(1), 0, "19 against 16: handed over");
        drop((held, more));
    }

    #[test]
    fn a_handed_connection_reaches_the_inbox_and_a_stopped_worker_gives_it_back() {
        let (balance, mut inboxes) = Balance::new(2);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let client = std::net::TcpStream::connect(addr).unwrap();
        let (accepted, peer) = listener.accept().unwrap();
        balance.hand(1, (accepted, peer, balance.serve(1))).unwrap();
        assert_eq!(balance.live(1), 1, "counted where it goes as it is handed, before it arrives");
        let (got, from, live) = inboxes[1].try_recv().expect("handed");
        assert_eq!((got.peer_addr().unwrap(), from), (client.local_addr().unwrap(), client.local_addr().unwrap()));
        drop(inboxes.remove(0));
        let back = balance.hand(0, (got, from, live)).expect_err("worker 0 stopped");
        assert_eq!(back.1, from);
        drop(back);
        assert_eq!(balance.live(1), 0, "a connection dropped in transit is uncounted");
        balance.retire(0);
        assert_eq!(balance.place(1), 1, "a retired worker is never the least loaded");
    }
}
