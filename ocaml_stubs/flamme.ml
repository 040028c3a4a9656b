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

let start ?hz ?output ?mode ?period () =
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
  check (start_ output hz mode period)

let stop () = check (stop_ ())

let is_running () = is_running_ ()

let with_profile ?hz ?output ?mode ?period f =
  start ?hz ?output ?mode ?period ();
  match f () with
  | v ->
      stop ();
      v
  | exception e ->
      let bt = Printexc.get_raw_backtrace () in
      (match stop_ () with
       | "" -> ()
       | msg -> prerr_endline ("flamme: " ^ msg));
      Printexc.raise_with_backtrace e bt

let () =
  at_exit (fun () ->
      if is_running () then
        match stop_ () with "" | "not running" -> () | msg -> prerr_endline ("flamme: " ^ msg))
