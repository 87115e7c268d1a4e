import { Resolver as DnsResolver } from 'node:dns/promises';
import { BlockList, isIP } from 'node:net';

/**
 * Where webhooks may be sent: https only, never to loopback, private, link-local,
 * metadata or otherwise special addresses, judged on the addresses the name resolves to at
 * every delivery (a name that resolved to a public address at registration can point at
 * 169.254.169.254 tomorrow). The delivery then connects to the very address that was checked
 * (see deliver.ts), so a second resolution cannot swap it. An operator allow-list
 * (WEBHOOK_ALLOW_HOSTS: host names, IP addresses or CIDR ranges) lifts the rules for what it names.
 */
// Two lists: Node's BlockList matches IPv4 addresses against IPv4-mapped IPv6 rules, so one
// list holding ::ffff:0:0/96 would refuse every IPv4 address.
const special4 = new BlockList();
const special6 = new BlockList();
for (const [network, prefix] of [
  ['0.0.0.0', 8], // "this network"
  ['10.0.0.0', 8],
  ['100.64.0.0', 10], // carrier-grade NAT
  ['127.0.0.0', 8],
  ['169.254.0.0', 16], // link-local, cloud metadata (169.254.169.254)
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.0.2.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['198.51.100.0', 24],
  ['203.0.113.0', 24],
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, broadcast
] as const) {
  special4.addSubnet(network, prefix, 'ipv4');
}
for (const [network, prefix] of [
  ['::', 96], // unspecified, loopback (::1), IPv4-compatible
  ['::ffff:0:0', 96], // IPv4-mapped: could name any IPv4 address above
  ['::ffff:0:0:0', 96], // IPv4-translated (SIIT, RFC 2765), same
  ['64:ff9b::', 96], // NAT64, same
  ['64:ff9b:1::', 48], // local-use NAT64 (RFC 8215), same
  ['2001::', 32], // Teredo: carries an IPv4 address
  ['2002::', 16], // 6to4: carries an IPv4 address
  ['100::', 64], // discard
  ['2001:db8::', 32], // documentation
  ['fc00::', 7], // unique local (incl. fd00:ec2::254, a metadata address)
  ['fe80::', 10], // link-local
  ['fec0::', 10], // site-local (deprecated, still private)
  ['ff00::', 8], // multicast
] as const) {
  special6.addSubnet(network, prefix, 'ipv6');
}

export type ResolvedAddress = { readonly address: string; readonly family: 4 | 6 };
/** DNS resolution, injectable so tests can make a name resolve to 10.x or a metadata address. */
export type Resolver = (hostname: string) => Promise<readonly ResolvedAddress[]>;

/** How long a target's name may take to resolve before the target is refused for it. */
export const DNS_TIMEOUT_MS = 5_000;

export type TargetPolicy = {
  /** WEBHOOK_ALLOW_HOSTS: lower-case host names, IP addresses, CIDR ranges. */
  readonly allowHosts: readonly string[];
  /** Answers in place of DNS (tests). */
  readonly resolver?: Resolver;
  /** The DNS resolver to ask; by default one using the system's name servers. */
  readonly dns?: DnsResolver;
  /** Default DNS_TIMEOUT_MS. */
  readonly dnsTimeoutMs?: number;
};

export class TargetRefusedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'TargetRefusedError';
  }
}

// Names are resolved with c-ares (dns.Resolver), never dns.lookup: getaddrinfo holds a libuv pool
// thread until the name server answers or gives up, and argon2 runs on those same few threads, so
// a tenant's target whose DNS never answers would stall every login. c-ares waits on a socket.
// It reads the name servers from resolv.conf but not /etc/hosts (localhost is handled apart).
let systemDns: DnsResolver | undefined;
const defaultDns = () => (systemDns ??= new DnsResolver({ timeout: 2_000, tries: 2 }));

class DnsTimeoutError extends Error {}

/** Every A and AAAA address of `host`; an answer of one family is enough when the other has none. */
async function resolveWithDns(dns: DnsResolver, host: string): Promise<readonly ResolvedAddress[]> {
  const [v4, v6] = await Promise.allSettled([dns.resolve4(host), dns.resolve6(host)]);
  const addresses: ResolvedAddress[] = [
    ...(v4.status === 'fulfilled' ? v4.value.map((address) => ({ address, family: 4 as const })) : []),
    ...(v6.status === 'fulfilled' ? v6.value.map((address) => ({ address, family: 6 as const })) : []),
  ];
  if (addresses.length > 0) return addresses;
  const failures = [v4, v6].flatMap((r) => (r.status === 'rejected' ? [r.reason as { code?: string }] : []));
  if (failures.some((f) => f.code === 'ETIMEOUT')) throw new DnsTimeoutError();
  throw failures[0] ?? new Error('no addresses');
}

/** `work`, or a DnsTimeoutError after `ms` (c-ares gives up on its own later; its answer is dropped). */
function within<T>(work: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new DnsTimeoutError()), ms);
  });
  return Promise.race([work, timeout]).finally(() => clearTimeout(timer));
}

/** localhost and its subdomains are loopback by definition and never asked of DNS. */
const isLocalhost = (host: string) => host === 'localhost' || host.endsWith('.localhost');
const LOOPBACK: readonly ResolvedAddress[] = [
  { address: '127.0.0.1', family: 4 },
  { address: '::1', family: 6 },
];

async function addressesOf(host: string, policy: TargetPolicy): Promise<readonly ResolvedAddress[]> {
  if (isIP(host)) return [{ address: host, family: isIP(host) === 6 ? 6 : 4 }];
  if (isLocalhost(host)) return LOOPBACK;
  const timeoutMs = policy.dnsTimeoutMs ?? DNS_TIMEOUT_MS;
  try {
    return await within(policy.resolver ? policy.resolver(host) : resolveWithDns(policy.dns ?? defaultDns(), host), timeoutMs);
  } catch (error) {
    if (error instanceof DnsTimeoutError) throw new TargetRefusedError(`${host}: no DNS answer within ${timeoutMs} ms`);
    throw new TargetRefusedError(`${host} does not resolve`);
  }
}

const familyOf = (address: string): 'ipv4' | 'ipv6' => (isIP(address) === 6 ? 'ipv6' : 'ipv4');
const bare = (hostname: string) => hostname.replace(/^\[(.*)\]$/, '$1').toLowerCase();

function allowList(entries: readonly string[]) {
  const names = new Set<string>();
  const addresses = new BlockList();
  for (const entry of entries) {
    const [ip, prefix] = entry.split('/');
    if (ip && isIP(ip)) {
      if (prefix === undefined) addresses.addAddress(ip, familyOf(ip));
      else addresses.addSubnet(ip, Number(prefix), familyOf(ip));
      names.add(bare(ip));
    } else {
      names.add(entry.toLowerCase());
    }
  }
  return { names, addresses };
}

/** The shape rules, without DNS: an absolute http(s) URL without credentials; http only for allow-listed hosts. */
export function checkTargetUrl(raw: string, policy: TargetPolicy): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new TargetRefusedError('url is not an absolute URL');
  }
  if (url.username || url.password) throw new TargetRefusedError('url must not carry credentials');
  const allowed = allowList(policy.allowHosts);
  if (url.protocol === 'http:') {
    if (!allowed.names.has(bare(url.hostname)))
      throw new TargetRefusedError('url must use https (plain http only for hosts in WEBHOOK_ALLOW_HOSTS)');
  } else if (url.protocol !== 'https:') {
    throw new TargetRefusedError('url must use https');
  }
  return url;
}

/**
 * Resolves the target and checks every address it resolves to; returns the one to connect to.
 * Refuses (TargetRefusedError) a special address unless the allow-list names the host or address.
 */
export async function resolveTarget(raw: string, policy: TargetPolicy): Promise<{ url: URL; address: ResolvedAddress }> {
  const url = checkTargetUrl(raw, policy);
  const host = bare(url.hostname);
  const allowed = allowList(policy.allowHosts);
  const addresses = await addressesOf(host, policy);
  if (addresses.length === 0) throw new TargetRefusedError(`${host} does not resolve`);
  const hostAllowed = allowed.names.has(host);
  for (const { address } of addresses) {
    if (hostAllowed || allowed.addresses.check(address, familyOf(address))) continue;
    const family = familyOf(address);
    if (family === 'ipv4' ? special4.check(address, 'ipv4') : special6.check(address, 'ipv6')) {
      // The address stays out of the message: it reaches the tenant (the 422, the delivery log), and
      // where an internal name points is the operator's to know, not the tenant's.
      throw new TargetRefusedError(`${host} resolves to a loopback, private, link-local or reserved address`);
    }
  }
  const first = addresses[0];
  if (!first) throw new TargetRefusedError(`${host} does not resolve`);
  return { url, address: first };
}
