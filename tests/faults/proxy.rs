//! A TCP proxy in front of the API server for one manager, that can cut it off as a network
//! partition does: from the cut on, nothing passes either way and nothing is closed (the
//! manager's requests hang, as packets that are dropped), until the cut is lifted.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
};

use tokio::{
    net::{TcpListener, TcpStream},
    sync::watch,
    task::JoinHandle,
};

/// The proxy; stops when dropped.
pub struct Proxy {
    /// Where it listens.
    pub addr: SocketAddr,
    cut: watch::Sender<bool>,
    /// Connections from the manager held, unanswered, while cut.
    held: Arc<Mutex<Vec<TcpStream>>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free port of 127.0.0.1 and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (cut, cut_rx) = watch::channel(false);
        let held: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let parked = held.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if *cut_rx.borrow() {
                    parked.lock().expect("held").push(client);
                    continue;
                }
                let (mut cut_rx, parked) = (cut_rx.clone(), parked.clone());
                tokio::spawn(async move {
                    let mut client = client;
                    let Ok(mut server) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = cut_rx.wait_for(|cut| *cut) => {
                            // Nothing more passes; the manager's side stays open, unanswered.
                            parked.lock().expect("held").push(client);
                        }
                    }
                });
            }
        });
        Self {
            addr,
            cut,
            held,
            accept,
        }
    }

    /// Cuts every connection, open or new, off.
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    /// Lifts the cut: the held connections close (as a partition's end resets them), and new
    /// ones pass again.
    pub fn heal(&self) {
        self.cut.send_replace(false);
        self.held.lock().expect("held").clear();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}
