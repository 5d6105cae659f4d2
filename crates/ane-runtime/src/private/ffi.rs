//! Run-time resolution of libobjc, Foundation, CoreFoundation, IOSurface and
//! AppleNeuralEngine, and `objc_msgSend` cast to exactly typed function
//! pointers (one per C signature used; never called variadically).

use std::ffi::{c_char, c_void, CStr, CString};

use libloading::Library;

use super::super::error::{Error, Result};

/// An Objective-C object pointer (`id`), possibly nil.
pub(crate) type Id = *mut c_void;
/// A selector (`SEL`).
pub(crate) type Sel = *mut c_void;

pub(crate) const LIBOBJC: &str = "/usr/lib/libobjc.A.dylib";
pub(crate) const FOUNDATION: &str = "/System/Library/Frameworks/Foundation.framework/Foundation";
pub(crate) const COREFOUNDATION: &str =
    "/System/Library/Frameworks/CoreFoundation.framework/CoreFoundation";
pub(crate) const IOSURFACE: &str = "/System/Library/Frameworks/IOSurface.framework/IOSurface";
pub(crate) const ANE_FRAMEWORK: &str =
    "/System/Library/PrivateFrameworks/AppleNeuralEngine.framework/AppleNeuralEngine";

/// `kIOSurfaceLockReadOnly`.
pub(crate) const IOSURFACE_LOCK_READ_ONLY: u32 = 1;

// One alias per C signature of `objc_msgSend` (after self and _cmd).
pub(crate) type MsgId = unsafe extern "C" fn(Id, Sel) -> Id;
pub(crate) type MsgIdId = unsafe extern "C" fn(Id, Sel, Id) -> Id;
pub(crate) type MsgIdPtr = unsafe extern "C" fn(Id, Sel, *const c_void) -> Id;
pub(crate) type MsgIdBytes = unsafe extern "C" fn(Id, Sel, *const c_void, usize) -> Id;
pub(crate) type MsgIdU64 = unsafe extern "C" fn(Id, Sel, u64) -> Id;
pub(crate) type MsgId3 = unsafe extern "C" fn(Id, Sel, Id, Id, Id) -> Id;
pub(crate) type MsgId7 = unsafe extern "C" fn(Id, Sel, Id, Id, Id, Id, Id, Id, Id) -> Id;
pub(crate) type MsgVoidIdId = unsafe extern "C" fn(Id, Sel, Id, Id);
pub(crate) type MsgVoidId = unsafe extern "C" fn(Id, Sel, Id);
pub(crate) type MsgUsize = unsafe extern "C" fn(Id, Sel) -> usize;
pub(crate) type MsgI64 = unsafe extern "C" fn(Id, Sel) -> i64;
pub(crate) type MsgCStr = unsafe extern "C" fn(Id, Sel) -> *const c_char;
pub(crate) type MsgBoolSel = unsafe extern "C" fn(Id, Sel, Sel) -> i8;
pub(crate) type MsgQosOptsErr = unsafe extern "C" fn(Id, Sel, u32, Id, *mut Id) -> i8;
pub(crate) type MsgQosOptsReqErr = unsafe extern "C" fn(Id, Sel, u32, Id, Id, *mut Id) -> i8;
pub(crate) type MsgQosErr = unsafe extern "C" fn(Id, Sel, u32, *mut Id) -> i8;

/// Every resolved entry point. The libraries stay open as long as this lives.
pub(crate) struct Objc {
    pub get_class: unsafe extern "C" fn(*const c_char) -> Id,
    pub sel_register: unsafe extern "C" fn(*const c_char) -> Sel,
    pub retain: unsafe extern "C" fn(Id) -> Id,
    pub release: unsafe extern "C" fn(Id),
    pub pool_push: unsafe extern "C" fn() -> *mut c_void,
    pub pool_pop: unsafe extern "C" fn(*mut c_void),
    pub temp_dir: unsafe extern "C" fn() -> Id,
    pub cf_release: unsafe extern "C" fn(*const c_void),
    pub surface_create: unsafe extern "C" fn(Id) -> Id,
    pub surface_lock: unsafe extern "C" fn(Id, u32, *mut u32) -> i32,
    pub surface_unlock: unsafe extern "C" fn(Id, u32, *mut u32) -> i32,
    pub surface_base: unsafe extern "C" fn(Id) -> *mut c_void,
    pub surface_alloc_size: unsafe extern "C" fn(Id) -> usize,
    /// `kIOSurfaceWidth`, `Height`, `BytesPerElement`, `BytesPerRow`, `AllocSize`, `PixelFormat`.
    pub surface_keys: [Id; 6],
    pub msg_id: MsgId,
    pub msg_id_id: MsgIdId,
    pub msg_id_ptr: MsgIdPtr,
    pub msg_id_bytes: MsgIdBytes,
    pub msg_id_u64: MsgIdU64,
    pub msg_id3: MsgId3,
    pub msg_id7: MsgId7,
    pub msg_void_id_id: MsgVoidIdId,
    pub msg_void_id: MsgVoidId,
    pub msg_usize: MsgUsize,
    pub msg_i64: MsgI64,
    pub msg_cstr: MsgCStr,
    pub msg_bool_sel: MsgBoolSel,
    pub msg_qos_opts_err: MsgQosOptsErr,
    pub msg_qos_opts_req_err: MsgQosOptsReqErr,
    pub msg_qos_err: MsgQosErr,
    _libs: Vec<Library>,
}

fn unavailable(reason: String) -> Error {
    Error::Unavailable { reason }
}

/// Opens a system library at its install path, or fails with `ANE unavailable:
/// cannot load <path>: …` (shared by the in-memory and e5rt drivers).
pub(crate) fn open(path: &str) -> Result<Library> {
    // SAFETY: loading a system library runs its initialisers; these are
    // Apple's own system libraries/frameworks at their fixed install paths,
    // which every macOS process may load. On other OSes the load fails and
    // nothing runs.
    unsafe { Library::new(path) }.map_err(|e| {
        let msg = e.to_string();
        // dlerror() repeats the path; keep one copy.
        let msg = msg
            .strip_prefix(path)
            .map(|m| m.trim_start_matches(':').trim())
            .unwrap_or(&msg);
        let hint = if cfg!(target_os = "macos") {
            ""
        } else {
            " (the ANE needs macOS on Apple silicon)"
        };
        unavailable(format!("cannot load {path}: {msg}{hint}"))
    })
}

/// Resolves `name` in `lib` as a value of type `T` (a function pointer or a
/// pointer to a data symbol).
///
/// # Safety
/// `T` must be the symbol's true type: the exact C signature for functions,
/// `*const X` for a data symbol of type `X`.
unsafe fn sym<T: Copy>(lib: &Library, lib_name: &str, name: &str) -> Result<T> {
    let mut bytes = name.as_bytes().to_vec();
    bytes.push(0);
    // SAFETY: forwarded from this function's contract.
    unsafe { lib.get::<T>(&bytes) }
        .map(|s| *s)
        .map_err(|e| unavailable(format!("symbol {name} missing from {lib_name}: {e}")))
}

impl Objc {
    /// Loads every library and resolves every entry point, or says which failed.
    pub(crate) fn load() -> Result<Objc> {
        let objc = open(LIBOBJC)?;
        let cf = open(COREFOUNDATION)?;
        let foundation = open(FOUNDATION)?;
        let iosurface = open(IOSURFACE)?;
        let ane = open(ANE_FRAMEWORK)?;
        // SAFETY (for every `sym` call below): each type is the documented C
        // signature of the named function (objc/runtime.h, objc/message.h,
        // Foundation's NSPathUtilities.h, CoreFoundation's CFBase.h,
        // IOSurface/IOSurfaceRef.h), or a pointer to a `CFStringRef` for
        // the `kIOSurface*` constants. `objc_msgSend` is resolved once per
        // exact signature it is called with, never as a variadic function,
        // as required on arm64.
        #[allow(clippy::undocumented_unsafe_blocks)]
        let o = unsafe {
            let key = |n: &str| -> Result<Id> {
                let p: *const Id = sym(&iosurface, IOSURFACE, n)?;
                if p.is_null() {
                    return Err(unavailable(format!("{n} is null")));
                }
                Ok(*p)
            };
            Objc {
                get_class: sym(&objc, LIBOBJC, "objc_getClass")?,
                sel_register: sym(&objc, LIBOBJC, "sel_registerName")?,
                retain: sym(&objc, LIBOBJC, "objc_retain")?,
                release: sym(&objc, LIBOBJC, "objc_release")?,
                pool_push: sym(&objc, LIBOBJC, "objc_autoreleasePoolPush")?,
                pool_pop: sym(&objc, LIBOBJC, "objc_autoreleasePoolPop")?,
                temp_dir: sym(&foundation, FOUNDATION, "NSTemporaryDirectory")?,
                cf_release: sym(&cf, COREFOUNDATION, "CFRelease")?,
                surface_create: sym(&iosurface, IOSURFACE, "IOSurfaceCreate")?,
                surface_lock: sym(&iosurface, IOSURFACE, "IOSurfaceLock")?,
                surface_unlock: sym(&iosurface, IOSURFACE, "IOSurfaceUnlock")?,
                surface_base: sym(&iosurface, IOSURFACE, "IOSurfaceGetBaseAddress")?,
                surface_alloc_size: sym(&iosurface, IOSURFACE, "IOSurfaceGetAllocSize")?,
                surface_keys: [
                    key("kIOSurfaceWidth")?,
                    key("kIOSurfaceHeight")?,
                    key("kIOSurfaceBytesPerElement")?,
                    key("kIOSurfaceBytesPerRow")?,
                    key("kIOSurfaceAllocSize")?,
                    key("kIOSurfacePixelFormat")?,
                ],
                msg_id: sym(&objc, LIBOBJC, "objc_msgSend")?,
                msg_id_id: sym(&objc, LIBOBJC, "objc_msgSend")?,
                msg_id_ptr: sym(&objc, LIBOBJC, "objc_msgSend")?,
                msg_id_bytes: sym(&objc, LIBOBJC, "objc_msgSend")?,
                msg_id_u64: sym(&objc, LIBOBJC, "objc_msgSend")?,
                msg_id3: sym(&objc, LIBOBJC, "objc_msgSend")?,
                msg_id7: sym(&objc, LIBOBJC, "objc_msgSend")?,
                msg_void_id_id: sym(&objc, LIBOBJC, "objc_msgSend")?,
                msg_void_id: sym(&objc, LIBOBJC, "objc_msgSend")?,
                msg_usize: sym(&objc, LIBOBJC, "objc_msgSend")?,
                msg_i64: sym(&objc, LIBOBJC, "objc_msgSend")?,
                msg_cstr: sym(&objc, LIBOBJC, "objc_msgSend")?,
                msg_bool_sel: sym(&objc, LIBOBJC, "objc_msgSend")?,
                msg_qos_opts_err: sym(&objc, LIBOBJC, "objc_msgSend")?,
                msg_qos_opts_req_err: sym(&objc, LIBOBJC, "objc_msgSend")?,
                msg_qos_err: sym(&objc, LIBOBJC, "objc_msgSend")?,
                _libs: vec![ane, iosurface, foundation, cf, objc],
            }
        };
        Ok(o)
    }

    /// `objc_getClass(name)`; nil when the class does not exist.
    pub(crate) fn class(&self, name: &str) -> Id {
        let Ok(c) = CString::new(name) else {
            return std::ptr::null_mut();
        };
        // SAFETY: `c` is a NUL-terminated string alive for the call;
        // objc_getClass only reads it and returns nil for unknown names.
        unsafe { (self.get_class)(c.as_ptr()) }
    }

    /// `sel_registerName(name)` (selectors are interned for the process).
    pub(crate) fn sel(&self, name: &str) -> Sel {
        let Ok(c) = CString::new(name) else {
            return std::ptr::null_mut();
        };
        // SAFETY: as in `class`; sel_registerName copies the string.
        unsafe { (self.sel_register)(c.as_ptr()) }
    }

    /// `[obj respondsToSelector:sel]` (for a class object: class methods).
    pub(crate) fn responds(&self, obj: Id, sel: &str) -> bool {
        if obj.is_null() {
            return false;
        }
        // SAFETY: `obj` is a live object or class (non-nil, checked);
        // respondsToSelector: is NSObject's `- (BOOL)respondsToSelector:(SEL)`.
        unsafe { (self.msg_bool_sel)(obj, self.sel("respondsToSelector:"), self.sel(sel)) != 0 }
    }

    /// `[cls instancesRespondToSelector:sel]`.
    pub(crate) fn instances_respond(&self, cls: Id, sel: &str) -> bool {
        if cls.is_null() {
            return false;
        }
        // SAFETY: `cls` is a class object (non-nil); the method is NSObject's
        // `+ (BOOL)instancesRespondToSelector:(SEL)`.
        unsafe {
            (self.msg_bool_sel)(cls, self.sel("instancesRespondToSelector:"), self.sel(sel)) != 0
        }
    }

    /// Sends a no-argument message returning an object.
    pub(crate) fn send(&self, obj: Id, sel: &str) -> Id {
        if obj.is_null() {
            return std::ptr::null_mut();
        }
        // SAFETY: callers only use this for selectors declared
        // `- (id)sel` / `+ (id)sel` on `obj`'s class (documented at each
        // call); a nil receiver is filtered above.
        unsafe { (self.msg_id)(obj, self.sel(sel)) }
    }

    /// An autoreleased `NSString` from UTF-8 text.
    pub(crate) fn nsstring(&self, s: &str) -> Result<Id> {
        let c = CString::new(s).map_err(|_| unavailable(format!("NUL in string {s:?}")))?;
        // SAFETY: `+[NSString stringWithUTF8String:(const char *)]`; `c` is
        // NUL-terminated and outlives the call (the string is copied).
        let r = unsafe {
            (self.msg_id_ptr)(
                self.class("NSString"),
                self.sel("stringWithUTF8String:"),
                c.as_ptr().cast(),
            )
        };
        Ok(r)
    }

    /// An autoreleased `NSData` copy of `bytes`.
    pub(crate) fn nsdata(&self, bytes: &[u8]) -> Id {
        // SAFETY: `+[NSData dataWithBytes:(const void *)length:(NSUInteger)]`
        // copies `bytes.len()` bytes from a live slice.
        unsafe {
            (self.msg_id_bytes)(
                self.class("NSData"),
                self.sel("dataWithBytes:length:"),
                bytes.as_ptr().cast(),
                bytes.len(),
            )
        }
    }

    /// An autoreleased `NSNumber` holding `v`.
    pub(crate) fn nsnumber(&self, v: u64) -> Id {
        // SAFETY: `+[NSNumber numberWithUnsignedLongLong:(unsigned long long)]`.
        unsafe {
            (self.msg_id_u64)(
                self.class("NSNumber"),
                self.sel("numberWithUnsignedLongLong:"),
                v,
            )
        }
    }

    /// An autoreleased empty `NSMutableDictionary`.
    pub(crate) fn dict(&self) -> Id {
        // SAFETY: `+[NSMutableDictionary dictionary]` returns an object.
        self.send(self.class("NSMutableDictionary"), "dictionary")
    }

    /// An autoreleased empty `NSMutableArray`.
    pub(crate) fn array(&self) -> Id {
        self.send(self.class("NSMutableArray"), "array")
    }

    /// `[dict setObject:value forKey:key]` (both non-nil).
    pub(crate) fn dict_set(&self, dict: Id, key: Id, value: Id) -> Result<()> {
        if dict.is_null() || key.is_null() || value.is_null() {
            return Err(unavailable("nil in dictionary construction".into()));
        }
        // SAFETY: `- (void)setObject:(id)forKey:(id<NSCopying>)` on an
        // NSMutableDictionary, all three pointers non-nil (checked).
        unsafe { (self.msg_void_id_id)(dict, self.sel("setObject:forKey:"), value, key) };
        Ok(())
    }

    /// `[array addObject:obj]` (both non-nil).
    pub(crate) fn array_add(&self, array: Id, obj: Id) -> Result<()> {
        if array.is_null() || obj.is_null() {
            return Err(unavailable("nil in array construction".into()));
        }
        // SAFETY: `- (void)addObject:(id)` on an NSMutableArray, non-nil args.
        unsafe { (self.msg_void_id)(array, self.sel("addObject:"), obj) };
        Ok(())
    }

    /// `[dict objectForKey:@key]`, nil when absent or `dict` is not a dictionary.
    pub(crate) fn dict_get(&self, dict: Id, key: &str) -> Id {
        if !self.responds(dict, "objectForKey:") {
            return std::ptr::null_mut();
        }
        let Ok(k) = self.nsstring(key) else {
            return std::ptr::null_mut();
        };
        // SAFETY: `- (id)objectForKey:(id)` exists on `dict` (checked above).
        unsafe { (self.msg_id_id)(dict, self.sel("objectForKey:"), k) }
    }

    /// Elements of an `NSArray` (empty when `arr` is not an array).
    pub(crate) fn array_items(&self, arr: Id) -> Vec<Id> {
        if !self.responds(arr, "objectAtIndex:") || !self.responds(arr, "count") {
            return Vec::new();
        }
        // SAFETY: `- (NSUInteger)count` exists on `arr` (checked above).
        let n = unsafe { (self.msg_usize)(arr, self.sel("count")) };
        (0..n.min(1 << 16))
            .map(|i| {
                // SAFETY: `- (id)objectAtIndex:(NSUInteger)` with i < count.
                unsafe { (self.msg_id_u64)(arr, self.sel("objectAtIndex:"), i as u64) }
            })
            .collect()
    }

    /// `[obj longLongValue]` when `obj` answers it (NSNumber, NSString).
    pub(crate) fn int_value(&self, obj: Id) -> Option<i64> {
        if !self.responds(obj, "longLongValue") {
            return None;
        }
        // SAFETY: `- (long long)longLongValue` exists on `obj` (checked).
        Some(unsafe { (self.msg_i64)(obj, self.sel("longLongValue")) })
    }

    /// The UTF-8 text of an `NSString` (or of any object's `description`).
    pub(crate) fn string(&self, obj: Id) -> Option<String> {
        if obj.is_null() {
            return None;
        }
        let s = if self.responds(obj, "UTF8String") {
            obj
        } else {
            self.send(obj, "description")
        };
        if !self.responds(s, "UTF8String") {
            return None;
        }
        // SAFETY: `- (const char *)UTF8String` exists on `s` (checked); the
        // returned buffer lives at least until the enclosing autorelease
        // pool pops, and it is copied at once.
        let p = unsafe { (self.msg_cstr)(s, self.sel("UTF8String")) };
        if p.is_null() {
            return None;
        }
        // SAFETY: a non-null UTF8String result is NUL-terminated.
        Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }

    /// Retains `obj` (so it outlives the autorelease pool); nil stays nil.
    pub(crate) fn keep(&self, obj: Id) -> Id {
        if obj.is_null() {
            return obj;
        }
        // SAFETY: objc_retain on a live object returned by the framework.
        unsafe { (self.retain)(obj) }
    }

    /// Releases an object previously [`Objc::keep`]-ed; nil is ignored.
    pub(crate) fn drop_obj(&self, obj: Id) {
        if !obj.is_null() {
            // SAFETY: balances exactly one `keep` of this object.
            unsafe { (self.release)(obj) }
        }
    }

    /// Runs `f` inside an autorelease pool.
    pub(crate) fn pool<T>(&self, f: impl FnOnce() -> T) -> T {
        // SAFETY: push/pop are balanced around `f`; objects that must
        // survive are retained by `keep` inside `f`.
        let token = unsafe { (self.pool_push)() };
        let r = f();
        // SAFETY: pops the pool pushed above (LIFO order holds: `f` cannot
        // leave a nested pool open because `pool` always pops its own).
        unsafe { (self.pool_pop)(token) };
        r
    }
}
