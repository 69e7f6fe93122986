// Package ca owns the direct-reach door's private certificate authority (SPEC R4): one ECDSA
// P-256 root per listen address and the short-lived leaf the door serves for that address,
// kept in one private folder (SPEC F1, F2).
//
// The root lives 10 years, has a CommonName (iOS shows it and needs it) that names fleet and the
// listen address and nothing of the machine — "fleet direct-reach root 192.168.1.20", no
// hostname, since GET /ca.crt serves it to strangers —, path length 0, extended key usage server
// authentication only, and critical name constraints that permit exactly the listen IP (/32 or
// /128) and no DNS name, email address or URI, in a form that both Go's crypto/x509 and OpenSSL
// honour. Listing only the IP range would leave the other name forms unconstrained; an empty
// excluded base is "every name" for DNS in both, but "no name" for email and URI in OpenSSL. So
// each of the three forms is permitted only under the reserved name "invalid" (RFC 6761), which
// is excluded as well, and DNS names keep the empty excluded base too. A key that signs nothing
// but a TLS server certificate for one IP address is worth little to a thief: a client or e-mail
// certificate it made, or one for any other name, does not verify.
//
// A root made before these rules (no extended key usage, no email or URI constraints, the
// machine's hostname in its CommonName) keeps being used for its address: phones trust it, and a
// new root is made only when the door moves outside it. An operator who wants the narrower root
// sooner takes the old one out of roots/ while the door is closed (a new one is then made at
// Open) and has every phone trust the new root and remove the old one.
//
// The leaf is issued through certmagic with this package's own Issuer and Storage: an IP SAN
// only, ExtKeyUsage ServerAuth, valid for at most LeafLifetime (7 days), renewed by certmagic's
// background maintenance (every 10 minutes it looks) once a third of its life is left
// (RenewalWindowRatio), and at Open when it is already due. OCSP stapling and ARI are off;
// nothing here talks to the network. The issuer's key names the root's fingerprint, so a new
// root forces a new leaf.
//
// On disk, under the folder given to Open (the caller gives it a folder of its own):
//
//	roots/<sha256-hex>.crt, .key   every root ever made, named by its fingerprint, never overwritten
//	leaf/                         certmagic's storage: certificates/…, locks/…
//	leaf/certificates/<issuer>/<ip>.broken-<UTC time>/   a leaf set aside (below), kept
//
// The root and the leaf are not judged alike when they cannot be used. The root is what every
// paired phone trusts: a root file that does not parse is an error that names it, and nothing is
// changed. The leaf is disposable: it is re-made from the root at any time and replaced every
// few days anyway, and no phone holds anything of it. certmagic renews it with a fresh key (the
// key rotates) and stores it as three separate atomic writes (.key, .crt, .json), so a process
// killed between them leaves a new key beside the old certificate, and a renewal rolled back
// after a failed write (certmagic deletes what it had written) leaves files missing. So at Open,
// a stored leaf for the address whose .key, .crt or .json is missing, whose key and certificate
// are not a pair, or one of whose files does not parse at all (garbage is not told apart from a
// torn renewal: the remedy is the same) is set aside: its folder is renamed to
// <ip>.broken-<UTC time> beside it, never deleted or overwritten (F2: nothing is silently lost),
// one warning (fleet.reach-leaf-set-aside) names both folders and why, and a new leaf is issued
// from the same root, which is not touched (R4). A leaf file that is too open, someone else's or
// a symlink is still refused (F1), never set aside. A leaf that parses and pairs but does not
// verify under its root for the address (something this package never writes) stays an error
// naming its folder. Set-aside folders are never removed by fleet; they can be deleted by hand.
//
// Guarantees: the folder and every folder below it are 0700 and every file 0600, including the
// lock files (this package implements certmagic's Storage on internal/state rather than using
// certmagic.FileStorage, which creates lock files 0644 and leaves an existing top folder as it
// finds it). An existing file or folder there that is group- or world-accessible, owned by
// another user, or a symlink is refused at Open with an error that names the path and the
// command that fixes it; nothing is re-permissioned. Every write is atomic (temporary file, fsync,
// rename). When the listen address moves outside the current root's constraints, the root made
// for the new address is used if there is one, else a new root is made and a warning logged;
// older roots stay where they are, so moving back finds the root phones already trust.
//
// What it must never do: sign anything but a leaf for its one listen IP, serve a certificate for
// any other name, delete or overwrite a root, or widen a mode.
package ca
