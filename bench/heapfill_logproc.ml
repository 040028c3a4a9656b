(* bench/heapfill_logproc.ml — a log-processing pipeline, for `make
   bench-heapfill` (heap-fill sampling vs Gc.Memprof): each line is
   generated with Printf, split, counted in a Hashtbl, indexed in a Map,
   echoed into a Buffer that is flushed every 2000 lines, and every 50,000
   lines the keys are sorted by count. DOMAINS domains each process 200,000
   lines. Run: heapfill_logproc.exe OUT RATE DOMAINS *)
module SM = Map.Make (String)

let[@inline never] gen_line i =
  Printf.sprintf "%d user%d GET /api/v1/items/%d?page=%d status=%d" i (i mod 997) (i * 31 mod 10007)
    (i mod 13) (if i mod 17 = 0 then 500 else 200)

let[@inline never] parse line = String.split_on_char ' ' line

let[@inline never] count tbl fields =
  match fields with
  | _ :: user :: _ :: path :: _ ->
      let k = user ^ " " ^ path in
      Hashtbl.replace tbl k (1 + try Hashtbl.find tbl k with Not_found -> 0)
  | _ -> ()

let[@inline never] index m i fields =
  match fields with _ :: user :: _ -> SM.add user i m | _ -> m

let[@inline never] render buf line =
  Buffer.add_string buf line;
  Buffer.add_char buf '\n'

let[@inline never] flush_buf buf out =
  out := String.length (Buffer.contents buf) + !out;
  Buffer.clear buf

let[@inline never] report_top tbl =
  let l = Hashtbl.fold (fun k v acc -> (v, k) :: acc) tbl [] in
  let l = List.sort compare l in
  List.length (List.filteri (fun i _ -> i < 10) (List.rev l))

let work n =
  let tbl = Hashtbl.create 16 in
  let m = ref SM.empty in
  let buf = Buffer.create 256 in
  let out = ref 0 and tops = ref 0 in
  for i = 1 to n do
    let line = gen_line i in
    let f = parse line in
    count tbl f;
    m := index !m i f;
    render buf line;
    if i mod 2000 = 0 then flush_buf buf out;
    if i mod 50_000 = 0 then tops := !tops + report_top tbl
  done;
  !out + !tops + SM.cardinal !m

let () =
  let out = Sys.argv.(1) in
  let alloc = float_of_string Sys.argv.(2) in
  let doms = int_of_string Sys.argv.(3) in
  Flamme.start ~output:out ~alloc ();
  let n = 200_000 in
  let ds = List.init (doms - 1) (fun _ -> Domain.spawn (fun () -> work n)) in
  let r = work n in
  let r = List.fold_left (fun a d -> a + Domain.join d) r ds in
  Flamme.stop ();
  Printf.printf "%d\n" r
