//! The private-framework driver: `AppleNeuralEngine.framework` through the
//! Objective-C runtime, every symbol resolved at run time.
//!
//! Nothing is linked: on a machine without the framework (Linux, old macOS)
//! [`PrivateDriver::open`] returns `ANE unavailable: <reason>`. The call
//! sequence follows ane-spec.md §5.3; surfaces use the flat byte style of
//! §6.1 (width = bytes, height 1) and the runtime writes into them at the
//! strides the model reports. Unproven on hardware.
#![allow(unsafe_code)]

pub(crate) mod ffi;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use ffi::{Id, Objc};

use super::attrs::{parse_attributes, Plist};
use super::driver::{Driver, ModelAttributes, ModelId, ProgramSource, RequestId, SurfaceId, QOS};
use super::error::{Error, Op, Result};
use super::modeldir::ModelDir;

/// Compiles issued through the framework by this process (all drivers).
static COMPILES: AtomicU32 = AtomicU32::new(0);

/// The four classes the in-memory path needs (all must resolve).
pub const REQUIRED_CLASSES: [&str; 4] = [
    "_ANEInMemoryModelDescriptor",
    "_ANEInMemoryModel",
    "_ANERequest",
    "_ANEIOSurfaceObject",
];

/// `(class, selector, is_class_method)` the driver sends.
pub const REQUIRED_SELECTORS: [(&str, &str, bool); 10] = [
    (
        "_ANEInMemoryModelDescriptor",
        "modelWithMILText:weights:optionsPlist:",
        true,
    ),
    ("_ANEInMemoryModel", "inMemoryModelWithDescriptor:", true),
    ("_ANEInMemoryModel", "hexStringIdentifier", false),
    ("_ANEInMemoryModel", "compileWithQoS:options:error:", false),
    ("_ANEInMemoryModel", "loadWithQoS:options:error:", false),
    ("_ANEInMemoryModel", "evaluateWithQoS:options:request:error:", false),
    ("_ANEInMemoryModel", "unloadWithQoS:error:", false),
    ("_ANEInMemoryModel", "model", false),
    ("_ANEIOSurfaceObject", "objectWithIOSurface:", true),
    (
        "_ANERequest",
        "requestWithInputs:inputIndices:outputs:outputIndices:weightsBuffer:perfStats:procedureIndex:",
        true,
    ),
];

/// What `anedvd info` shows: which libraries, classes and selectors resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    /// Libraries loaded (paths).
    pub libraries: Vec<&'static str>,
    /// `(class, found)`.
    pub classes: Vec<(String, bool)>,
    /// `(class, selector, found)`.
    pub selectors: Vec<(String, String, bool)>,
}

impl Probe {
    /// The first missing class or selector, as a one-line reason.
    pub fn missing(&self) -> Option<String> {
        if let Some((c, _)) = self.classes.iter().find(|(_, ok)| !ok) {
            return Some(format!("class {c} not found"));
        }
        self.selectors
            .iter()
            .find(|(_, _, ok)| !ok)
            .map(|(c, s, _)| format!("{c} does not respond to {s}"))
    }
}

struct PModel {
    model: Id,
    dir: Option<ModelDir>,
    loaded: bool,
}

struct PSurface {
    surface: Id,
    wrapper: Id,
    len: usize,
}

/// The [`Driver`] over Apple's private framework.
pub struct PrivateDriver {
    objc: Objc,
    next: u64,
    models: BTreeMap<ModelId, PModel>,
    surfaces: BTreeMap<SurfaceId, PSurface>,
    requests: BTreeMap<RequestId, Id>,
}

impl std::fmt::Debug for PrivateDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrivateDriver")
            .field("models", &self.models.len())
            .field("surfaces", &self.surfaces.len())
            .field("requests", &self.requests.len())
            .finish()
    }
}

fn probe_with(o: &Objc) -> Probe {
    let classes = REQUIRED_CLASSES
        .iter()
        .map(|c| (c.to_string(), !o.class(c).is_null()))
        .collect();
    let selectors = REQUIRED_SELECTORS
        .iter()
        .map(|(c, s, class_method)| {
            let cls = o.class(c);
            let ok = if *class_method {
                o.responds(cls, s)
            } else {
                o.instances_respond(cls, s)
            };
            (c.to_string(), s.to_string(), ok)
        })
        .collect();
    Probe {
        libraries: vec![
            ffi::LIBOBJC,
            ffi::COREFOUNDATION,
            ffi::FOUNDATION,
            ffi::IOSURFACE,
            ffi::ANE_FRAMEWORK,
        ],
        classes,
        selectors,
    }
}

/// Loads the libraries and checks the classes and selectors without
/// creating anything. `Err(Unavailable)` when a library or symbol is missing.
pub fn probe() -> Result<Probe> {
    let o = Objc::load()?;
    Ok(o.pool(|| probe_with(&o)))
}

/// Compiles issued through the framework by this process so far.
pub fn process_compiles() -> u32 {
    COMPILES.load(Ordering::Relaxed)
}

fn to_plist(o: &Objc, obj: Id, depth: u32) -> Plist {
    if obj.is_null() {
        return Plist::Other("nil".into());
    }
    if depth > 8 {
        return Plist::Other("(too deep)".into());
    }
    if o.responds(obj, "UTF8String") {
        return Plist::Str(o.string(obj).unwrap_or_default());
    }
    if o.responds(obj, "objectForKey:") && o.responds(obj, "allKeys") {
        let mut d = BTreeMap::new();
        for k in o.array_items(o.send(obj, "allKeys")) {
            if let Some(ks) = o.string(k) {
                let v = o.dict_get(obj, &ks);
                d.insert(ks, to_plist(o, v, depth + 1));
            }
        }
        return Plist::Dict(d);
    }
    if o.responds(obj, "objectAtIndex:") {
        return Plist::Array(
            o.array_items(obj)
                .into_iter()
                .map(|x| to_plist(o, x, depth + 1))
                .collect(),
        );
    }
    if let Some(i) = o.int_value(obj) {
        return Plist::Int(i);
    }
    Plist::Other(o.string(obj).unwrap_or_default())
}

impl PrivateDriver {
    /// Loads the framework and checks every class and selector the driver uses.
    pub fn open() -> Result<PrivateDriver> {
        let objc = Objc::load()?;
        let probe = objc.pool(|| probe_with(&objc));
        if let Some(reason) = probe.missing() {
            return Err(Error::Unavailable { reason });
        }
        Ok(PrivateDriver {
            objc,
            next: 1,
            models: BTreeMap::new(),
            surfaces: BTreeMap::new(),
            requests: BTreeMap::new(),
        })
    }

    fn id(&mut self) -> u64 {
        let id = self.next;
        self.next += 1;
        id
    }

    fn ns_error(&self, op: Op, err: Id, fallback: &str) -> Error {
        let o = &self.objc;
        let message = o
            .string(o.send(err, "localizedDescription"))
            .or_else(|| o.string(err))
            .unwrap_or_else(|| fallback.to_string());
        let code = if o.responds(err, "code") {
            // SAFETY: `- (NSInteger)code` exists on `err` (checked).
            Some(unsafe { (o.msg_i64)(err, o.sel("code")) })
        } else {
            None
        };
        let lower = message.to_ascii_lowercase();
        // UNVERIFIED classification: resource exhaustion is retried; a
        // failed load is retried as maderix/tmc do (slot reclamation).
        let transient = lower.contains("resource") || lower.contains("busy") || op == Op::Load;
        Error::Driver {
            op,
            code,
            message,
            transient,
        }
    }

    fn model(&self, m: ModelId) -> Result<&PModel> {
        self.models.get(&m).ok_or(Error::Handle {
            kind: "model",
            id: m.0,
        })
    }

    fn surface(&self, s: SurfaceId) -> Result<&PSurface> {
        self.surfaces.get(&s).ok_or(Error::Handle {
            kind: "surface",
            id: s.0,
        })
    }

    fn temp_base(&self) -> PathBuf {
        // SAFETY: `NSString *NSTemporaryDirectory(void)` takes no arguments.
        let t = unsafe { (self.objc.temp_dir)() };
        self.objc
            .string(t)
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir)
    }

    fn compile_inner(&self, src: &ProgramSource) -> Result<PModel> {
        let o = &self.objc;
        let cerr = |m: &str| Error::driver(Op::Compile, m);
        let mil = o.nsdata(src.mil.as_bytes());
        let weights = o.dict();
        for (k, v) in &src.weights {
            super::modeldir::sanitize_weight_key(k)?;
            let entry = o.dict();
            o.dict_set(entry, o.nsstring("offset")?, o.nsnumber(0))?;
            o.dict_set(entry, o.nsstring("data")?, o.nsdata(v))?;
            o.dict_set(weights, o.nsstring(k)?, entry)?;
        }
        if mil.is_null() || weights.is_null() {
            return Err(cerr("could not build NSData/NSDictionary"));
        }
        // SAFETY: `+[_ANEInMemoryModelDescriptor modelWithMILText:(NSData *)
        // weights:(NSDictionary *) optionsPlist:(id)]` (ane-spec §5.2;
        // presence checked at open); arguments are live objects or nil.
        let desc = unsafe {
            (o.msg_id3)(
                o.class("_ANEInMemoryModelDescriptor"),
                o.sel("modelWithMILText:weights:optionsPlist:"),
                mil,
                weights,
                std::ptr::null_mut(),
            )
        };
        if desc.is_null() {
            return Err(cerr("descriptor is nil (MIL text rejected)"));
        }
        // SAFETY: `+[_ANEInMemoryModel inMemoryModelWithDescriptor:(id)]`
        // with the live descriptor.
        let model = unsafe {
            (o.msg_id_id)(
                o.class("_ANEInMemoryModel"),
                o.sel("inMemoryModelWithDescriptor:"),
                desc,
            )
        };
        if model.is_null() {
            return Err(cerr("inMemoryModelWithDescriptor: returned nil"));
        }
        let hex = o
            .string(o.send(model, "hexStringIdentifier"))
            .ok_or_else(|| cerr("hexStringIdentifier returned nil"))?;
        let dir = ModelDir::write(&self.temp_base(), &hex, src)?;
        COMPILES.fetch_add(1, Ordering::Relaxed);
        let mut err: Id = std::ptr::null_mut();
        // SAFETY: `- (BOOL)compileWithQoS:(unsigned int) options:(NSDictionary *)
        // error:(NSError **)` on the live model; `err` is a valid out slot.
        let ok = unsafe {
            (o.msg_qos_opts_err)(
                model,
                o.sel("compileWithQoS:options:error:"),
                QOS,
                o.dict(),
                &mut err,
            )
        };
        if ok == 0 {
            let e = self.ns_error(Op::Compile, err, "compileWithQoS: returned NO");
            let _ = dir.remove();
            return Err(e);
        }
        Ok(PModel {
            model: o.keep(model),
            dir: Some(dir),
            loaded: false,
        })
    }

    fn qos_call(&self, op: Op, model: Id, sel: &str) -> Result<()> {
        let o = &self.objc;
        let mut err: Id = std::ptr::null_mut();
        let ok = if op == Op::Unload {
            // SAFETY: `- (BOOL)unloadWithQoS:(unsigned int) error:(NSError **)`.
            unsafe { (o.msg_qos_err)(model, o.sel(sel), QOS, &mut err) }
        } else {
            // SAFETY: `- (BOOL)loadWithQoS:(unsigned int) options:(NSDictionary *)
            // error:(NSError **)` on the live model.
            unsafe { (o.msg_qos_opts_err)(model, o.sel(sel), QOS, o.dict(), &mut err) }
        };
        if ok == 0 {
            return Err(self.ns_error(op, err, &format!("{sel} returned NO")));
        }
        Ok(())
    }

    fn lock(&self, s: &PSurface, options: u32) -> Result<*mut u8> {
        // SAFETY: `IOSurfaceLock(IOSurfaceRef, IOSurfaceLockOptions, uint32_t *seed)`
        // on a surface this driver created; a null seed is allowed.
        let rc = unsafe { (self.objc.surface_lock)(s.surface, options, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(Error::Driver {
                op: Op::SurfaceIo,
                code: Some(i64::from(rc)),
                message: "IOSurfaceLock failed".into(),
                transient: false,
            });
        }
        // SAFETY: the surface is locked, so its base address is stable.
        let base = unsafe { (self.objc.surface_base)(s.surface) };
        Ok(base.cast())
    }

    fn unlock(&self, s: &PSurface, options: u32) {
        // SAFETY: balances the `lock` with the same options.
        unsafe { (self.objc.surface_unlock)(s.surface, options, std::ptr::null_mut()) };
    }
}

impl Driver for PrivateDriver {
    fn name(&self) -> &'static str {
        "private"
    }

    fn compile(&mut self, src: &ProgramSource) -> Result<ModelId> {
        super::modeldir::check_weight_keys(src)?;
        let m = self.objc.pool(|| self.compile_inner(src))?;
        let id = ModelId(self.id());
        self.models.insert(id, m);
        Ok(id)
    }

    fn load(&mut self, model: ModelId) -> Result<()> {
        let m = self.model(model)?.model;
        self.objc
            .pool(|| self.qos_call(Op::Load, m, "loadWithQoS:options:error:"))?;
        if let Some(pm) = self.models.get_mut(&model) {
            pm.loaded = true;
        }
        Ok(())
    }

    fn attributes(&mut self, model: ModelId) -> Result<ModelAttributes> {
        let m = self.model(model)?.model;
        let o = &self.objc;
        let plist = o.pool(|| to_plist(o, o.send(o.send(m, "model"), "modelAttributes"), 0));
        parse_attributes(&plist)
    }

    fn create_surface(&mut self, bytes: usize) -> Result<SurfaceId> {
        if bytes == 0 {
            return Err(Error::driver(Op::CreateSurface, "zero-size surface"));
        }
        let o = &self.objc;
        let made = o.pool(|| -> Result<PSurface> {
            let props = o.dict();
            let [w, h, bpe, bpr, alloc, fmt] = o.surface_keys;
            let b = bytes as u64;
            for (k, v) in [(w, b), (h, 1), (bpe, 1), (bpr, b), (alloc, b), (fmt, 0)] {
                o.dict_set(props, k, o.nsnumber(v))?;
            }
            // SAFETY: `IOSurfaceRef IOSurfaceCreate(CFDictionaryRef)`; an
            // NSDictionary is toll-free bridged to CFDictionaryRef. The result
            // is owned (+1, Create rule) and released with CFRelease.
            let surface = unsafe { (o.surface_create)(props) };
            if surface.is_null() {
                return Err(Error::driver(
                    Op::CreateSurface,
                    "IOSurfaceCreate returned NULL",
                ));
            }
            // SAFETY: `+[_ANEIOSurfaceObject objectWithIOSurface:(IOSurfaceRef)]`
            // with the live surface.
            let wrapper = unsafe {
                (o.msg_id_ptr)(
                    o.class("_ANEIOSurfaceObject"),
                    o.sel("objectWithIOSurface:"),
                    surface.cast_const(),
                )
            };
            if wrapper.is_null() {
                // SAFETY: releases the surface created above.
                unsafe { (o.cf_release)(surface.cast_const()) };
                return Err(Error::driver(
                    Op::CreateSurface,
                    "objectWithIOSurface: returned nil",
                ));
            }
            // SAFETY: `size_t IOSurfaceGetAllocSize(IOSurfaceRef)`.
            let len = unsafe { (o.surface_alloc_size)(surface) };
            Ok(PSurface {
                surface,
                wrapper: o.keep(wrapper),
                len: len.min(bytes),
            })
        })?;
        let id = SurfaceId(self.id());
        self.surfaces.insert(id, made);
        Ok(id)
    }

    fn surface_len(&self, surface: SurfaceId) -> Result<usize> {
        Ok(self.surface(surface)?.len)
    }

    fn write_surface(&mut self, surface: SurfaceId, data: &[u8]) -> Result<()> {
        let s = self.surface(surface)?;
        if data.len() > s.len {
            return Err(Error::driver(
                Op::SurfaceIo,
                format!("{} bytes into a surface of {}", data.len(), s.len),
            ));
        }
        let base = self.lock(s, 0)?;
        // SAFETY: the surface is locked for writing and holds at least
        // `s.len >= data.len()` bytes at `base`; `data` is a separate Rust slice.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), base, data.len()) };
        self.unlock(s, 0);
        Ok(())
    }

    fn read_surface(&mut self, surface: SurfaceId, out: &mut [u8]) -> Result<()> {
        let s = self.surface(surface)?;
        if out.len() > s.len {
            return Err(Error::driver(
                Op::SurfaceIo,
                format!("{} bytes from a surface of {}", out.len(), s.len),
            ));
        }
        let ro = ffi::IOSURFACE_LOCK_READ_ONLY;
        let base = self.lock(s, ro)?;
        // SAFETY: the surface is locked read-only and holds at least
        // `out.len()` bytes at `base`; `out` is a separate Rust slice.
        unsafe { std::ptr::copy_nonoverlapping(base.cast_const(), out.as_mut_ptr(), out.len()) };
        self.unlock(s, ro);
        Ok(())
    }

    fn build_request(
        &mut self,
        model: ModelId,
        inputs: &[SurfaceId],
        outputs: &[SurfaceId],
    ) -> Result<RequestId> {
        self.model(model)?;
        let ins: Vec<Id> = inputs
            .iter()
            .map(|s| self.surface(*s).map(|p| p.wrapper))
            .collect::<Result<_>>()?;
        let outs: Vec<Id> = outputs
            .iter()
            .map(|s| self.surface(*s).map(|p| p.wrapper))
            .collect::<Result<_>>()?;
        let o = &self.objc;
        let req = o.pool(|| -> Result<Id> {
            let arrays = |objs: &[Id]| -> Result<(Id, Id)> {
                let (a, idx) = (o.array(), o.array());
                for (i, x) in objs.iter().enumerate() {
                    o.array_add(a, *x)?;
                    o.array_add(idx, o.nsnumber(i as u64))?;
                }
                Ok((a, idx))
            };
            let (ia, ii) = arrays(&ins)?;
            let (oa, oi) = arrays(&outs)?;
            let null = std::ptr::null_mut();
            // SAFETY: `+[_ANERequest requestWithInputs:(NSArray *)
            // inputIndices:(NSArray *) outputs:(NSArray *) outputIndices:(NSArray *)
            // weightsBuffer:(id) perfStats:(id) procedureIndex:(NSNumber *)]`
            // (ane-spec §5.2), live arrays, nil buffer/perf stats.
            let r = unsafe {
                (o.msg_id7)(
                    o.class("_ANERequest"),
                    o.sel("requestWithInputs:inputIndices:outputs:outputIndices:weightsBuffer:perfStats:procedureIndex:"),
                    ia,
                    ii,
                    oa,
                    oi,
                    null,
                    null,
                    o.nsnumber(0),
                )
            };
            if r.is_null() {
                return Err(Error::driver(Op::BuildRequest, "requestWithInputs:… returned nil"));
            }
            Ok(o.keep(r))
        })?;
        let id = RequestId(self.id());
        self.requests.insert(id, req);
        Ok(id)
    }

    fn evaluate(&mut self, model: ModelId, request: RequestId) -> Result<()> {
        let m = self.model(model)?.model;
        let r = *self.requests.get(&request).ok_or(Error::Handle {
            kind: "request",
            id: request.0,
        })?;
        let o = &self.objc;
        o.pool(|| {
            let mut err: Id = std::ptr::null_mut();
            // SAFETY: `- (BOOL)evaluateWithQoS:(unsigned int) options:(NSDictionary *)
            // request:(id) error:(NSError **)` on the live, loaded model with
            // the live request; `err` is a valid out slot.
            let ok = unsafe {
                (o.msg_qos_opts_req_err)(
                    m,
                    o.sel("evaluateWithQoS:options:request:error:"),
                    QOS,
                    o.dict(),
                    r,
                    &mut err,
                )
            };
            if ok == 0 {
                return Err(self.ns_error(Op::Evaluate, err, "evaluateWithQoS: returned NO"));
            }
            Ok(())
        })
    }

    fn unload(&mut self, model: ModelId) -> Result<()> {
        let m = self.model(model)?.model;
        self.objc
            .pool(|| self.qos_call(Op::Unload, m, "unloadWithQoS:error:"))?;
        if let Some(pm) = self.models.get_mut(&model) {
            pm.loaded = false;
        }
        Ok(())
    }

    fn release_request(&mut self, request: RequestId) {
        if let Some(r) = self.requests.remove(&request) {
            self.objc.drop_obj(r);
        }
    }

    fn release_surface(&mut self, surface: SurfaceId) {
        if let Some(s) = self.surfaces.remove(&surface) {
            self.objc.drop_obj(s.wrapper);
            // SAFETY: balances the +1 of IOSurfaceCreate.
            unsafe { (self.objc.cf_release)(s.surface.cast_const()) };
        }
    }

    fn release_model(&mut self, model: ModelId) {
        let Some(m) = self.models.get(&model) else {
            return;
        };
        if m.loaded {
            let _ = self.unload(model);
        }
        if let Some(m) = self.models.remove(&model) {
            self.objc.drop_obj(m.model);
            if let Some(d) = m.dir {
                let _ = d.remove();
            }
        }
    }

    fn compiles(&self) -> u32 {
        process_compiles()
    }
}

impl Drop for PrivateDriver {
    fn drop(&mut self) {
        let reqs: Vec<RequestId> = self.requests.keys().copied().collect();
        for r in reqs {
            self.release_request(r);
        }
        let surfs: Vec<SurfaceId> = self.surfaces.keys().copied().collect();
        for s in surfs {
            self.release_surface(s);
        }
        let models: Vec<ModelId> = self.models.keys().copied().collect();
        for m in models {
            self.release_model(m);
        }
    }
}
