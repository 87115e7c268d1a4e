import { isIP } from 'node:net';

/**
 * Whether `entry` is a valid WEBHOOK_ALLOW_HOSTS item: a host name, an IP address or a CIDR
 * range. Only the shape: the configuration checks it at start-up, the webhook target guard
 * applies the list.
 */
export function isAllowHostEntry(entry: string): boolean {
  const [ip, prefix, extra] = entry.split('/');
  if (extra !== undefined || !ip) return false;
  if (isIP(ip)) {
    if (prefix === undefined) return true;
    if (!/^\d{1,3}$/.test(prefix)) return false;
    return Number(prefix) <= (isIP(ip) === 6 ? 128 : 32);
  }
  return prefix === undefined && /^(?=.{1,253}$)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$/i.test(ip);
}
