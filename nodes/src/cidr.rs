//! Address plans: the cluster CIDR cut into per-node pod CIDRs (as the node IPAM controller
//! does with `--cluster-cidr` and `--node-cidr-mask-size`), node InternalIPs, and each
//! node's pod IPs (as a host-local CNI plugin hands them out).

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

/// An IPv4 network `addr/prefix` (host bits zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Cidr {
    /// First address, as a number.
    pub(crate) base: u32,
    /// Prefix length, 0..=32.
    pub(crate) prefix: u8,
}

impl Cidr {
    /// Parses `10.244.0.0/16`; host bits must be zero.
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        let (addr, prefix) = s
            .split_once('/')
            .ok_or_else(|| format!("invalid CIDR {s:?}: missing /prefix"))?;
        let addr: Ipv4Addr = addr
            .parse()
            .map_err(|_| format!("invalid CIDR {s:?}: not an IPv4 address"))?;
        let prefix: u8 = prefix
            .parse()
            .ok()
            .filter(|p| *p <= 32)
            .ok_or_else(|| format!("invalid CIDR {s:?}: bad prefix length"))?;
        let base = u32::from(addr);
        if base & !mask(prefix) != 0 {
            return Err(format!("invalid CIDR {s:?}: host bits set"));
        }
        Ok(Cidr { base, prefix })
    }

    /// Number of addresses.
    pub(crate) fn size(self) -> u64 {
        1u64 << (32 - u32::from(self.prefix))
    }

    /// Whether `ip` is inside.
    pub(crate) fn contains(self, ip: Ipv4Addr) -> bool {
        u32::from(ip) & mask(self.prefix) == self.base
    }

    /// The `index`th subnet of prefix `sub_prefix`, if it fits.
    pub(crate) fn subnet(self, sub_prefix: u8, index: u64) -> Option<Cidr> {
        if sub_prefix < self.prefix || sub_prefix > 32 {
            return None;
        }
        let count = 1u64 << (sub_prefix - self.prefix);
        if index >= count {
            return None;
        }
        let step = 1u64 << (32 - u32::from(sub_prefix));
        let base = u32::try_from(u64::from(self.base) + index * step).ok()?;
        Some(Cidr {
            base,
            prefix: sub_prefix,
        })
    }

    /// The address at `offset` from the base.
    pub(crate) fn nth(self, offset: u64) -> Option<Ipv4Addr> {
        if offset >= self.size() {
            return None;
        }
        u32::try_from(u64::from(self.base) + offset)
            .ok()
            .map(Ipv4Addr::from)
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", Ipv4Addr::from(self.base), self.prefix)
    }
}

fn mask(prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(prefix))
    }
}

/// Pod IPs in use on one node: the first free address from `.2` (`.1` is the bridge's), up
/// to the last before broadcast.
#[derive(Debug)]
pub(crate) struct PodIps {
    cidr: Cidr,
    used: BTreeSet<u32>,
}

impl PodIps {
    /// No address in use yet.
    pub(crate) fn new(cidr: Cidr) -> Self {
        PodIps {
            cidr,
            used: BTreeSet::new(),
        }
    }

    /// Records an address found in a pod's status (after a restart). Returns false if it is
    /// not in this node's range or already taken.
    pub(crate) fn adopt(&mut self, ip: Ipv4Addr) -> bool {
        self.cidr.contains(ip) && self.used.insert(u32::from(ip))
    }

    /// The lowest free address, or `None` when the range is full.
    pub(crate) fn allocate(&mut self) -> Option<Ipv4Addr> {
        let first = 2u64;
        let last = self.cidr.size().saturating_sub(2);
        (first..=last)
            .filter_map(|o| self.cidr.nth(o))
            .find(|ip| !self.used.contains(&u32::from(*ip)))
            .inspect(|ip| {
                self.used.insert(u32::from(*ip));
            })
    }

    /// Returns an address to the pool.
    pub(crate) fn release(&mut self, ip: Ipv4Addr) {
        self.used.remove(&u32::from(ip));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subnets_are_cut_in_order_and_found_again() {
        let c = Cidr::parse("10.128.0.0/9").unwrap();
        let s = c.subnet(24, 300).unwrap();
        assert_eq!(s.to_string(), "10.129.44.0/24");
        assert!(c.subnet(24, 1 << 15).is_none());
        assert!(Cidr::parse("10.0.0.1/8").is_err());
    }

    #[test]
    fn pod_ips_skip_the_gateway_and_reuse_released_addresses() {
        let mut ips = PodIps::new(Cidr::parse("10.0.5.0/30").unwrap());
        assert_eq!(ips.allocate(), Some(Ipv4Addr::new(10, 0, 5, 2)));
        assert_eq!(ips.allocate(), None);
        ips.release(Ipv4Addr::new(10, 0, 5, 2));
        assert!(ips.adopt(Ipv4Addr::new(10, 0, 5, 2)));
        assert!(!ips.adopt(Ipv4Addr::new(10, 0, 6, 2)));
    }
}
