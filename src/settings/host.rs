//! `"<getHostAddress>"` as `cluster.hostname` or `management.hostname`: the address of this
//! machine that peers can reach, found when the node starts. It is what a container needs, where
//! the address is only known at run time (Docker assigns it; Kubernetes has the downward API
//! instead, see `k8s/`).

use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket};

use super::{Settings, SettingsError};

/// The placeholder replaced by this machine's address.
pub const HOST_ADDRESS: &str = "<getHostAddress>";

impl Settings {
    /// Replaces [`HOST_ADDRESS`] in `cluster.hostname`, `management.hostname` and their bind
    /// counterparts with this machine's address. Other values are left alone.
    ///
    /// # Errors
    /// The key holding the placeholder when no non-loopback address can be found.
    pub fn resolve_host_address(&mut self) -> Result<(), SettingsError> {
        let mut found: Option<IpAddr> = None;
        for (key, value) in [
            ("cluster.hostname", &mut self.cluster.hostname),
            ("cluster.bind_hostname", &mut self.cluster.bind_hostname),
            ("management.hostname", &mut self.management.hostname),
            ("management.bind_hostname", &mut self.management.bind_hostname),
        ] {
            if value != HOST_ADDRESS {
                continue;
            }
            let ip = match found {
                Some(ip) => ip,
                None => {
                    let ip = host_address().map_err(|e| {
                        SettingsError::new(
                            key,
                            format!("{HOST_ADDRESS:?}"),
                            format!(
                                "a machine with a non-loopback address (route lookup and host \
                                 name resolution both failed: {e}); set the address explicitly"
                            ),
                        )
                    })?;
                    found = Some(ip);
                    ip
                }
            };
            *value = ip.to_string();
        }
        Ok(())
    }
}

/// This machine's address: the source address of the default route (asked of the kernel by
/// connecting a UDP socket, which sends nothing), else the first non-loopback address the host
/// name resolves to (`/etc/hosts` in a container).
///
/// # Errors
/// When neither gives a non-loopback address.
pub fn host_address() -> io::Result<IpAddr> {
    let routed = [
        (SocketAddr::from(([0, 0, 0, 0], 0)), "192.0.2.1:9"),
        (SocketAddr::from(([0u16; 8], 0)), "[2001:db8::1]:9"),
    ];
    for (bind, documentation_net) in routed {
        let local = UdpSocket::bind(bind)
            .and_then(|s| s.connect(documentation_net).map(|()| s))
            .and_then(|s| s.local_addr());
        if let Ok(local) = local
            && usable(local.ip())
        {
            return Ok(local.ip());
        }
    }
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))?;
    let name = name.trim();
    (name, 0)
        .to_socket_addrs()?
        .map(|a| a.ip())
        .find(|ip| usable(*ip))
        .ok_or_else(|| io::Error::other(format!("host name {name:?} has no non-loopback address")))
}

fn usable(ip: IpAddr) -> bool {
    !ip.is_loopback() && !ip.is_unspecified()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_placeholder_becomes_a_non_loopback_address_and_other_values_stay() {
        let mut s = Settings::default();
        s.cluster.hostname = HOST_ADDRESS.into();
        s.management.hostname = HOST_ADDRESS.into();
        s.management.bind_hostname = "0.0.0.0".into();
        match s.resolve_host_address() {
            Ok(()) => {
                let ip: IpAddr = s.cluster.hostname.parse().expect("an IP address");
                assert!(usable(ip), "{ip}");
                assert_eq!(s.management.hostname, s.cluster.hostname);
            }
            // A sandbox with nothing but loopback: the error names the key and the fix.
            Err(e) => {
                assert_eq!(e.key, "cluster.hostname");
                assert!(e.expected.contains("set the address explicitly"), "{e}");
            }
        }
        assert_eq!(s.management.bind_hostname, "0.0.0.0");
        assert_eq!(s.cluster.bind_hostname, "");
    }
}
