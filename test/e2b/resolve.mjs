// Stands in for wildcard DNS in the domain-mode run: names under
// SANDLOT_TEST_DOMAIN (*.sandlot.test) resolve to SANDLOT_TEST_IP, where
// sandlot-api serves TLS. Loaded with `node --import`; the SDK is unchanged.
import dns from 'node:dns'

const domain = process.env.SANDLOT_TEST_DOMAIN
const ip = process.env.SANDLOT_TEST_IP
const lookup = dns.lookup

dns.lookup = function (host, opts, cb) {
  if (typeof opts === 'function') [cb, opts] = [opts, {}]
  if (domain && ip && host.endsWith('.' + domain)) {
    const all = typeof opts === 'object' && opts.all
    return process.nextTick(() => (all ? cb(null, [{ address: ip, family: 4 }]) : cb(null, ip, 4)))
  }
  return lookup.call(this, host, opts, cb)
}
