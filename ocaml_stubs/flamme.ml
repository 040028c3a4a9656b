(* ocaml_stubs/flamme.ml — the OCaml side of the flamme library (see
   flamme.mli). Argument checking and exceptions live here; the C stubs in
   flamme_stubs.c only call the agent and return an error line ("" = ok), so
   no exception is ever raised from C with the runtime lock released. *)

exception Error of string

let () =
  Printexc.register_printer (function
    | Error msg -> Some ("Flamme.Error: " ^ msg)
    | _ -> None)

type mode = [ `Cpu | `Wall ]

(* output ("" = default), hz (0 = default), mode (-1 default, 0 cpu, 1 wall),
   period in ms (0 = FLAMME_PERIOD or none). *)
external start_ : string -> int -> int -> int -> string = "caml_flamme_start"
external stop_ : unit -> string = "caml_flamme_stop"
external is_running_ : unit -> bool = "caml_flamme_is_running"

let check = function "" -> () | msg -> raise (Error msg)

(* Allocation profiling (Gc.Memprof, OCaml 5.3+): rate, live tracking,
   callstack depth; "" or why not (no agent, or one too old). *)
external alloc_mode_ : float -> bool -> int -> string = "caml_flamme_alloc_mode"
(* One sampled block: the runtime's record of it (only where it lies: the
   stub checks the callstack's place against it, see flamme_stubs.c), its
   callstack, n_samples, size, heap lor (source lsl 8); returns its id, 0
   when the agent dropped it. *)
external alloc_sample_ :
  Gc.Memprof.allocation -> Printexc.raw_backtrace -> int -> int -> int -> int
  = "caml_flamme_alloc_sample" [@@noalloc]
external alloc_event_ : int -> int -> unit = "caml_flamme_alloc_event" [@@noalloc]

let default_alloc_rate = 1e-4

(* The Memprof profile this library runs: its [active] flag is cleared at
   stop, so blocks tracked by an earlier profile stop reporting (their
   promotion callback returns None) instead of naming ids of another. *)
type alloc_run = { active : bool Atomic.t; live : bool }

let alloc_run : alloc_run option ref = ref None

(* 2: Custom, and any source a later release adds (5.4's Map_file, the
   out-of-heap data of a file mapped as a bigarray). Naming 5.3's
   constructors only, with no catch-all, does not compile on 5.4. *)
let source_code = function
  | Gc.Memprof.Normal -> 0
  | Gc.Memprof.Marshal -> 1
  | _ -> 2

let tracker run =
  let sample heap (a : Gc.Memprof.allocation) =
    if not (Atomic.get run.active) then None
    else
      let id =
        alloc_sample_ a a.callstack a.n_samples a.size (heap lor (source_code a.source lsl 8))
      in
      if run.live && id > 0 then Some id else None
  in
  let event kind id = if Atomic.get run.active then alloc_event_ id kind in
  {
    Gc.Memprof.alloc_minor = sample 1;
    alloc_major = sample 2;
    promote =
      (fun id ->
        if Atomic.get run.active then (
          alloc_event_ id 1;
          Some id)
        else None);
    dealloc_minor = event 2;
    dealloc_major = event 3;
  }

(* Starts Memprof in this domain (and the domains and threads it spawns
   after). Returns "" or why not. *)
let alloc_start rate live =
  match alloc_mode_ rate live 0 with
  | "" -> (
      let run = { active = Atomic.make true; live } in
      try
        (* 5.3 returns the profile, 5.1/5.2 unit: neither is needed. *)
        ignore (Gc.Memprof.start ~sampling_rate:rate (tracker run));
        alloc_run := Some run;
        ""
      with Failure msg ->
        Atomic.set run.active false;
        ignore (alloc_mode_ 0. false 0);
        if Sys.ocaml_release.major = 5 && Sys.ocaml_release.minor < 3 then
          Printf.sprintf "allocation profiling needs OCaml 5.3 or later (Gc.Memprof); this is %s"
            Sys.ocaml_version
        else "cannot start allocation profiling: " ^ msg)
  | msg -> msg

(* Stops this library's Memprof profile, if any: with live tracking, a full
   major collection first, so that what is still tracked is what is
   reachable. *)
let alloc_stop () =
  match !alloc_run with
  | None -> ()
  | Some run ->
      alloc_run := None;
      if run.live then Gc.full_major ();
      Atomic.set run.active false;
      (try Gc.Memprof.stop () with Failure _ -> ());
      ignore (alloc_mode_ 0. false 0)

(* flamme record --alloc[=RATE] [--live] sets these for programs that link
   the library: the defaults of ~alloc and ~live. *)
let env_alloc () =
  match Sys.getenv_opt "FLAMME_ALLOC" with
  | Some r -> ( match float_of_string_opt r with Some v -> Some v | None -> Some nan)
  | None -> None

let start ?hz ?output ?mode ?period ?alloc ?live () =
  let live =
    match live with Some l -> l | None -> Sys.getenv_opt "FLAMME_LIVE" = Some "1"
  in
  let alloc = match alloc with None -> env_alloc () | a -> a in
  let alloc =
    match alloc with
    | None -> None
    | Some r when r > 0. && r <= 1. -> Some r
    | Some r -> raise (Error (Printf.sprintf "alloc rate must be in (0, 1], got %g" r))
  in
  let hz =
    match hz with
    | None -> 0
    | Some h when h >= 1 && h <= 10_000 -> h
    | Some h -> raise (Error (Printf.sprintf "hz must be in 1..10000, got %d" h))
  in
  let output =
    match output with
    | None -> ""
    | Some "" -> raise (Error "output path is empty")
    | Some p when String.contains p '\000' -> raise (Error "output path contains a NUL byte")
    | Some p -> p
  in
  let mode = match mode with None -> -1 | Some `Cpu -> 0 | Some `Wall -> 1 in
  let period =
    match period with
    | None -> 0
    | Some s when s >= 0.1 && s <= 86400. -> int_of_float (s *. 1000. +. 0.5)
    | Some s -> raise (Error (Printf.sprintf "period must be in 0.1..86400 seconds, got %g" s))
  in
  check (start_ output hz mode period);
  match alloc with
  | None -> ()
  | Some rate -> (
      match alloc_start rate live with
      | "" -> ()
      | msg ->
          ignore (stop_ ());
          raise (Error msg))

let stop () =
  alloc_stop ();
  check (stop_ ())

let is_running () = is_running_ ()

let with_profile ?hz ?output ?mode ?period ?alloc ?live f =
  start ?hz ?output ?mode ?period ?alloc ?live ();
  match f () with
  | v ->
      stop ();
      v
  | exception e ->
      let bt = Printexc.get_raw_backtrace () in
      alloc_stop ();
      (match stop_ () with
       | "" -> ()
       | msg -> prerr_endline ("flamme: " ^ msg));
      Printexc.raise_with_backtrace e bt

let () =
  at_exit (fun () ->
      alloc_stop ();
      if is_running () then
        match stop_ () with "" | "not running" -> () | msg -> prerr_endline ("flamme: " ^ msg))
