//! A TCP proxy in front of a server, for fault tests: each chunk a client sends goes
//! through a rule that forwards it, answers it in the server's place, or forwards it and
//! then cuts the link, its reply lost.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What the proxy does with a chunk a client sent.
pub enum Verdict {
    Forward,
    /// Not forwarded: these bytes go back to the client as the server's reply.
    Answer(Vec<u8>),
    /// Forwarded (the command runs); its reply is swallowed and both sides of the link are
    /// closed 200 ms later.
    ForwardThenCut,
}

pub struct Proxy {
    pub port: u16,
}

impl Proxy {
    /// Listens on a loopback port of its own and proxies each connection to port `to`.
    pub fn start(to: u16, rule: impl Fn(&[u8]) -> Verdict + Send + Sync + 'static) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let rule = Arc::new(rule);
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let Ok(server) = TcpStream::connect(("127.0.0.1", to)) else {
                    continue;
                };
                let swallow = Arc::new(AtomicBool::new(false));
                let (mut c_in, mut s_out) =
                    (client.try_clone().unwrap(), server.try_clone().unwrap());
                let mut c_answer = client.try_clone().unwrap();
                let (mut s_in, mut c_out) = (server, client);
                let (rule, cut) = (rule.clone(), swallow.clone());
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    while let Ok(n) = c_in.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        let (to_server, then_cut) = match rule(&buf[..n]) {
                            Verdict::Forward => (true, false),
                            Verdict::Answer(reply) => {
                                if c_answer.write_all(&reply).is_err() {
                                    break;
                                }
                                (false, false)
                            }
                            Verdict::ForwardThenCut => {
                                cut.store(true, Ordering::SeqCst);
                                (true, true)
                            }
                        };
                        if to_server && s_out.write_all(&buf[..n]).is_err() {
                            break;
                        }
                        if then_cut {
                            std::thread::sleep(Duration::from_millis(200));
                            let _ = s_out.shutdown(Shutdown::Both);
                            let _ = c_in.shutdown(Shutdown::Both);
                            break;
                        }
                    }
                });
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    while let Ok(n) = s_in.read(&mut buf) {
                        if n == 0 || swallow.load(Ordering::SeqCst) {
                            break;
                        }
                        if c_out.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = c_out.shutdown(Shutdown::Both);
                });
            }
        });
        Proxy { port }
    }
}
