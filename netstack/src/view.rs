//! Device adaptors that let one smoltcp `Interface` serve many small socket sets.
//!
//! - [`OneFrame`] hands smoltcp a single, already received frame (plus the transmit token
//!   that came with it), so `poll_ingress_single` processes exactly the frame we
//!   demultiplexed, against the socket set we chose.
//! - [`Egress`] forwards `transmit` to the real device and counts frames.

use smoltcp::phy::{Device, DeviceCapabilities, PacketMeta, RxToken, TxToken};
use smoltcp::time::Instant;

/// A device whose receive queue holds one borrowed frame.
pub(crate) struct OneFrame<'f, 'c, T: TxToken> {
    pub(crate) frame: Option<&'f [u8]>,
    pub(crate) tx: Option<T>,
    pub(crate) caps: &'c DeviceCapabilities,
    pub(crate) frames_out: &'c mut u64,
}

/// The borrowed frame as an `RxToken`.
pub(crate) struct SliceRx<'f>(&'f [u8]);

impl RxToken for SliceRx<'_> {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        f(self.0)
    }
}

/// A transmit token that counts the frames it sends.
pub(crate) struct CountedTx<'c, T: TxToken> {
    inner: T,
    frames_out: &'c mut u64,
}

impl<T: TxToken> TxToken for CountedTx<'_, T> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        *self.frames_out += 1;
        self.inner.consume(len, f)
    }

    fn set_meta(&mut self, meta: PacketMeta) {
        self.inner.set_meta(meta);
    }
}

impl<'f, T: TxToken> Device for OneFrame<'f, '_, T> {
    type RxToken<'a>
        = SliceRx<'f>
    where
        Self: 'a;
    type TxToken<'a>
        = CountedTx<'a, T>
    where
        Self: 'a;

    fn receive(&mut self, _timestamp: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        let frame = self.frame.take()?;
        let tx = self.tx.take()?;
        Some((
            SliceRx(frame),
            CountedTx {
                inner: tx,
                frames_out: self.frames_out,
            },
        ))
    }

    fn transmit(&mut self, _timestamp: Instant) -> Option<Self::TxToken<'_>> {
        let tx = self.tx.take()?;
        Some(CountedTx {
            inner: tx,
            frames_out: self.frames_out,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        self.caps.clone()
    }
}

/// The real device for egress, counting frames and remembering whether it ran out of
/// transmit tokens.
pub(crate) struct Egress<'d, 'c, D: Device> {
    pub(crate) device: &'d mut D,
    pub(crate) caps: &'c DeviceCapabilities,
    pub(crate) frames_out: &'c mut u64,
    pub(crate) exhausted: bool,
}

impl<D: Device> Device for Egress<'_, '_, D> {
    type RxToken<'a>
        = D::RxToken<'a>
    where
        Self: 'a;
    type TxToken<'a>
        = CountedTx<'a, D::TxToken<'a>>
    where
        Self: 'a;

    fn receive(&mut self, _timestamp: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        // Egress never receives: frames are only taken by the demultiplexer.
        None
    }

    fn transmit(&mut self, timestamp: Instant) -> Option<Self::TxToken<'_>> {
        match self.device.transmit(timestamp) {
            Some(inner) => Some(CountedTx {
                inner,
                frames_out: self.frames_out,
            }),
            None => {
                self.exhausted = true;
                None
            }
        }
    }

    fn capabilities(&self) -> DeviceCapabilities {
        self.caps.clone()
    }
}

/// A transmit token that writes into a scratch buffer and sends nothing, for frames we
/// feed smoltcp ourselves (which never warrant a reply).
pub(crate) struct Discard<'a> {
    pub(crate) scratch: &'a mut [u8],
}

impl TxToken for Discard<'_> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        match self.scratch.get_mut(..len) {
            Some(buf) => f(buf),
            None => f(&mut vec![0u8; len]),
        }
    }
}
