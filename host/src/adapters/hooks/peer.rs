//! Who is on the other end of a loopback connection, from the kernel (issue 28, items 2 and 3): the TCP
//! socket's owner uid and inode from `/proc/net/tcp`, the process that holds the inode from
//! `/proc/<pid>/fd`, and that process's ancestry from `/proc/<pid>/stat`. A bearer token says only that
//! its holder read a file or an environment; these say which process and which user asks.
//!
//! Linux only, like the rest of the host's process handling. A process is named by its pid and its start
//! time (clock ticks since boot), so a pid reused by a later process is never taken for the first.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

/// A process: its pid and its start time, which together name it for as long as the machine is up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Proc {
    pub pid: u32,
    pub start: u64,
}

impl std::fmt::Display for Proc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {}", self.pid)
    }
}

/// `/proc/net/tcp`'s spelling of an IPv4 socket address: the address as the kernel's raw 32-bit value
/// (little-endian on the machines this runs on) and the port, both in hex.
fn proc_addr(a: SocketAddrV4) -> String {
    format!("{:08X}:{:04X}", u32::from_le_bytes(a.ip().octets()), a.port())
}

/// The sockets of `/proc/net/tcp` whose local and remote addresses are these, with the state wanted
/// (`0A` listen, `01` established): (uid, inode) of the first.
fn tcp_line(local: &str, remote: Option<&str>, state: &str) -> std::io::Result<Option<(u32, u64)>> {
    let table = std::fs::read_to_string("/proc/net/tcp")?;
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 || f[1] != local || f[3] != state || remote.is_some_and(|r| f[2] != r) {
            continue;
        }
        if let (Ok(uid), Ok(inode)) = (f[7].parse::<u32>(), f[9].parse::<u64>()) {
            return Ok(Some((uid, inode)));
        }
    }
    Ok(None)
}

/// The uid of whoever listens on `addr` (TCP, IPv4), if anyone does.
pub fn listener_uid(addr: SocketAddrV4) -> std::io::Result<Option<u32>> {
    Ok(tcp_line(&proc_addr(addr), Some("00000000:0000"), "0A")?.map(|(uid, _)| uid))
}

/// The other end of a connection this process accepted on `server` from `peer`: the peer socket's owner
/// uid and inode (both ends are on this machine: loopback). Asked of the kernel's `sock_diag` by the exact
/// four-tuple (a hash lookup, microseconds); `/proc/net/tcp` (about a millisecond: the kernel walks its
/// whole table) where netlink is not available.
pub fn peer_socket(server: SocketAddr, peer: SocketAddr) -> std::io::Result<Option<(u32, u64)>> {
    let (SocketAddr::V4(server), SocketAddr::V4(peer)) = (server, peer) else { return Ok(None) };
    match sock_diag(peer, server) {
        Ok(found) => Ok(found),
        Err(_) => tcp_line(&proc_addr(peer), Some(&proc_addr(server)), "01"),
    }
}

/// One `SOCK_DIAG_BY_FAMILY` request (linux/inet_diag.h) for the TCP socket whose local address is `local`
/// and remote `remote`: its (uid, inode), None when there is no such socket (ENOENT).
fn sock_diag(local: SocketAddrV4, remote: SocketAddrV4) -> std::io::Result<Option<(u32, u64)>> {
    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const NLMSG_ERROR: u16 = 2;
    const NLM_F_REQUEST: u16 = 1;
    // The request: nlmsghdr (16 bytes), then inet_diag_req_v2 (8 bytes and an inet_diag_sockid of 48).
    let mut req = Vec::with_capacity(72);
    req.extend_from_slice(&72u32.to_ne_bytes());
    req.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    req.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    req.extend_from_slice(&1u32.to_ne_bytes()); // seq
    req.extend_from_slice(&0u32.to_ne_bytes()); // pid: the kernel
    req.extend_from_slice(&[libc::AF_INET as u8, libc::IPPROTO_TCP as u8, 0, 0]);
    req.extend_from_slice(&u32::MAX.to_ne_bytes()); // every state
    req.extend_from_slice(&local.port().to_be_bytes());
    req.extend_from_slice(&remote.port().to_be_bytes());
    for ip in [local.ip(), remote.ip()] {
        req.extend_from_slice(&ip.octets());
        req.extend_from_slice(&[0; 12]);
    }
    req.extend_from_slice(&0u32.to_ne_bytes()); // interface: any
    req.extend_from_slice(&[0xff; 8]); // INET_DIAG_NOCOOKIE
    debug_assert_eq!(req.len(), 72);
    // SAFETY: a netlink socket owned by `fd` below and closed on every path; every buffer passed to the
    // kernel is a live Vec or array of the length given.
    let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, libc::NETLINK_SOCK_DIAG) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let raw = std::os::fd::AsRawFd::as_raw_fd(&fd);
    let timeout = libc::timeval { tv_sec: 1, tv_usec: 0 };
    let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    let sent = unsafe {
        libc::setsockopt(raw, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &timeout as *const _ as *const libc::c_void, std::mem::size_of::<libc::timeval>() as u32);
        libc::sendto(
            raw,
            req.as_ptr() as *const libc::c_void,
            req.len(),
            0,
            &kernel as *const _ as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_nl>() as u32,
        )
    };
    if sent != req.len() as isize {
        return Err(std::io::Error::last_os_error());
    }
    let mut buf = [0u8; 8192];
    let n = unsafe { libc::recv(raw, buf.as_mut_ptr() as *mut libc::c_void, buf.len(), 0) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let msg = &buf[..n as usize];
    let u16_at = |i: usize| msg.get(i..i + 2).map(|b| u16::from_ne_bytes([b[0], b[1]]));
    let u32_at = |i: usize| msg.get(i..i + 4).map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
    let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "a sock_diag answer too short");
    match u16_at(4).ok_or_else(bad)? {
        NLMSG_ERROR => match u32_at(16).ok_or_else(bad)? as i32 {
            e if e == -libc::ENOENT => Ok(None),
            e => Err(std::io::Error::from_raw_os_error(-e)),
        },
        // nlmsghdr (16), then inet_diag_msg: family, state, timer, retrans (4), the sockid (48), expires,
        // rqueue, wqueue (12), uid, inode.
        SOCK_DIAG_BY_FAMILY => Ok(Some((u32_at(80).ok_or_else(bad)?, u32_at(84).ok_or_else(bad)? as u64))),
        t => Err(std::io::Error::new(std::io::ErrorKind::InvalidData, format!("a sock_diag answer of type {t}"))),
    }
}

/// The process holding the socket `inode` among the processes of `uid` that this process may inspect
/// (a scan of `/proc/*/fd`). A socket shared by several processes (inherited) is attributed to the first
/// found: a descendant that inherited it is one more reason to refuse, never a way in (see the server).
pub fn socket_holder(uid: u32, inode: u64) -> Option<Proc> {
    use std::os::unix::fs::MetadataExt;
    let needle = format!("socket:[{inode}]");
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        if e.metadata().map(|m| m.uid()).ok() != Some(uid) {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(e.path().join("fd")) else { continue };
        for fd in fds.flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == needle.as_str()) {
                return stat(pid).map(|(start, _)| Proc { pid, start });
            }
        }
    }
    None
}

/// (start time, parent pid) of `pid`, from `/proc/<pid>/stat` (the command name in parentheses may hold
/// anything, so the fields are counted from its closing one).
fn stat(pid: u32) -> Option<(u64, u32)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state(0) ppid(1) ... starttime is field 22 of the line, index 19 here.
    Some((f.get(19)?.parse().ok()?, f.get(1)?.parse().ok()?))
}

/// The process `pid` names now, if it is alive.
pub fn process(pid: u32) -> Option<Proc> {
    stat(pid).map(|(start, _)| Proc { pid, start })
}

/// Whether `p` is still the process it was (alive, not a reused pid).
pub fn alive(p: Proc) -> bool {
    process(p.pid) == Some(p)
}

/// The ancestors of `p`, nearest first, up to (not including) pid 1.
pub fn ancestors(p: Proc) -> Vec<Proc> {
    let mut out = Vec::new();
    let mut pid = p.pid;
    while let Some((_, ppid)) = stat(pid) {
        if ppid <= 1 || out.len() > 256 {
            break;
        }
        match process(ppid) {
            Some(a) => out.push(a),
            None => break,
        }
        pid = ppid;
    }
    out
}

/// Who asks on a connection accepted on `server` from `peer`: the uid, and the process when it can be
/// found. None when the kernel lists no such connection.
pub fn asking(server: SocketAddr, peer: SocketAddr) -> Option<(u32, Option<Proc>)> {
    let (uid, inode) = peer_socket(server, peer).ok()??;
    Some((uid, socket_holder(uid, inode)))
}

/// The loopback address a server listens on for `port`.
pub fn loopback(port: u16) -> SocketAddrV4 {
    SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_found_behind_its_own_connection_and_its_listener() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let server = l.local_addr().unwrap();
        let SocketAddr::V4(v4) = server else { unreachable!() };
        assert_eq!(listener_uid(v4).unwrap(), Some(crate::private::euid()));
        let c = std::net::TcpStream::connect(server).unwrap();
        let (_accepted, peer) = l.accept().unwrap();
        assert_eq!(peer, c.local_addr().unwrap());
        // The kernel's two ways of saying which socket it is agree.
        let (SocketAddr::V4(p4), SocketAddr::V4(s4)) = (peer, server) else { unreachable!() };
        let by_netlink = sock_diag(p4, s4).unwrap();
        assert!(by_netlink.is_some());
        assert_eq!(by_netlink, tcp_line(&proc_addr(p4), Some(&proc_addr(s4)), "01").unwrap());
        assert_eq!(sock_diag(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 1), s4).unwrap(), None, "no such socket");
        let (uid, who) = asking(server, peer).unwrap();
        assert_eq!(uid, crate::private::euid());
        let me = process(std::process::id()).unwrap();
        assert_eq!(who, Some(me));
        assert!(alive(me));
        let up = ancestors(me);
        assert_eq!(up.first().map(|p| p.pid), Some(std::os::unix::process::parent_id()));
        // Nobody listens on port 1 (a port just released may be bound again at once by another process,
        // as a parallel test run showed).
        drop(l);
        assert_eq!(listener_uid(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 1)).unwrap(), None);
    }
}
