//! The ANE runtime: a driver interface, the private-framework driver and a simulated driver.
